#include "metrics_log.hpp"

#include <doctest/doctest.h>

#include <cmath>
#include <limits>

TEST_SUITE("runtime::MetricsLog") {
  TEST_CASE("a line is one JSON object, whole numbers print without a fraction, NaN as null") {
    const double nan = std::numeric_limits<double>::quiet_NaN();
    CHECK(dlrun::runtime::metrics_line(1700000000.25,
                                       {{"step", 10}, {"goodput", 1234.5}, {"x", nan}}) ==
          "{\"time\":1700000000.25,\"step\":10,\"goodput\":1234.5,\"x\":null}\n");
  }
}
