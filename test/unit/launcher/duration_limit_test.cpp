#include "dlrun/launcher/duration_limit.hpp"

#include <cmath>
#include <limits>

#include <doctest/doctest.h>

using namespace dlrun::launcher;

TEST_SUITE("launcher::DurationLimit") {
  TEST_CASE("zero to one week is accepted") {
    CHECK_FALSE(duration_problem(0));
    CHECK_FALSE(duration_problem(0.25));
    CHECK_FALSE(duration_problem(10));
    CHECK_FALSE(duration_problem(604800));
  }
  TEST_CASE("NaN, infinities, negatives and absurd values are refused with the value and the range") {
    const double inf = std::numeric_limits<double>::infinity();
    CHECK(duration_problem(std::nan("")) == "nan is out of range: must be a number of seconds from 0 to 604800");
    CHECK(duration_problem(inf) == "inf is out of range: must be a number of seconds from 0 to 604800");
    CHECK(duration_problem(-inf) == "-inf is out of range: must be a number of seconds from 0 to 604800");
    CHECK(duration_problem(-1) == "-1 is out of range: must be a number of seconds from 0 to 604800");
    CHECK(duration_problem(604800.5).has_value());
    CHECK(duration_problem(1e10) == "10000000000 is out of range: must be a number of seconds from 0 to 604800");
    CHECK(duration_problem(1e10, "1e10") == "1e10 is out of range: must be a number of seconds from 0 to 604800");
  }
}
