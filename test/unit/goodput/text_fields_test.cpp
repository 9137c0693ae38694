// dlrun::text (common/): the numbers and fields of the state files that the noise scale, the
// throughput profile and checkpoints write, without iostreams.
#include "dlrun/text_fields.hpp"

#include <doctest/doctest.h>

#include <cmath>
#include <limits>
#include <string>
#include <vector>

namespace text = dlrun::text;

TEST_SUITE("text_fields") {
  TEST_CASE("every double reads back exactly") {
    const std::vector<double> values = {0.1, 1.0 / 3.0, -2.5e-300, 1e300, 6.02214076e23, 0.0,
                                        std::numeric_limits<double>::denorm_min(),
                                        std::numeric_limits<double>::max(), 123456789.0};
    for (double v : values) {
      double back = -1;
      CHECK(text::parse(text::number(v), back));
      CHECK(back == v);
    }
    CHECK(text::number(0.5) == "0.5");
    CHECK(text::number(3.0) == "3");
  }

  TEST_CASE("the 17 digits iostreams wrote before still read") {
    double v = 0;
    CHECK(text::parse("0.10000000000000001", v));
    CHECK(v == 0.1);
    CHECK(text::parse("1.0000000000000001e-05", v));
    CHECK(v == 1e-05);
  }

  TEST_CASE("a field is a number only as a whole") {
    double d = 7;
    int64_t i = 7;
    int n = 7;
    uint64_t u = 7;
    CHECK_FALSE(text::parse("", d));
    CHECK_FALSE(text::parse("1.5x", d));
    CHECK_FALSE(text::parse("x", d));
    CHECK(d == 7);  // untouched on failure
    CHECK_FALSE(text::parse("2.5", i));
    CHECK_FALSE(text::parse("99999999999999999999", i));
    CHECK_FALSE(text::parse("-1", u));
    CHECK_FALSE(text::parse("3000000000", n));
    CHECK(text::parse("-42", i));
    CHECK(i == -42);
    CHECK(text::parse("18446744073709551615", u));
    CHECK(u == 18446744073709551615ull);
  }

  TEST_CASE("fields split on any blanks, lines on newlines (a last line without one included)") {
    const auto f = text::fields("  entry 1\t2   3.5 \r");
    REQUIRE(f.size() == 4);
    CHECK(f[0] == "entry");
    CHECK(f[3] == "3.5");
    CHECK(text::fields("   ").empty());
    const auto l = text::lines("a b\n\nc");
    REQUIRE(l.size() == 3);
    CHECK(l[0] == "a b");
    CHECK(l[1].empty());
    CHECK(l[2] == "c");
    CHECK(text::lines("one\n").size() == 1);
    CHECK(text::lines("").empty());
  }
}
