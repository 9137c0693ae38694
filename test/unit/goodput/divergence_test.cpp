#include "goodput/divergence.hpp"

#include <doctest/doctest.h>

#include <cmath>
#include <limits>
#include <stdexcept>

namespace rt = dlrun::runtime;

TEST_CASE("a loss that rises past 10x its lowest raises one alarm that names the lowest") {
  rt::DivergenceWatch watch;
  CHECK_FALSE(watch.observe(2.3, 64));
  CHECK_FALSE(watch.observe(0.8, 128));
  CHECK_FALSE(watch.observe(0.5, 256));
  CHECK_FALSE(watch.observe(4.9, 512));  // 9.8x: noisy, not yet a runaway
  const auto alarm = watch.observe(5.1, 512);
  REQUIRE(alarm);
  CHECK(alarm->loss == 5.1);
  CHECK(alarm->lowest == 0.5);
  CHECK(alarm->lowest_batch == 256);
  CHECK_FALSE(watch.observe(1e6, 512));  // once
}

TEST_CASE("a loss that is not finite raises the alarm, also before any other loss") {
  rt::DivergenceWatch first;
  const auto alarm = first.observe(std::numeric_limits<double>::quiet_NaN(), 64);
  REQUIRE(alarm);
  CHECK(std::isnan(alarm->loss));
  CHECK(alarm->lowest == 0);
  CHECK(alarm->lowest_batch == 0);
  rt::DivergenceWatch later;
  CHECK_FALSE(later.observe(1.0, 64));
  CHECK(later.observe(std::numeric_limits<double>::infinity(), 128));
}

TEST_CASE("losses that are zero or negative set no lowest: no ratio is taken from them") {
  rt::DivergenceWatch watch;
  CHECK_FALSE(watch.observe(-3.0, 64));
  CHECK_FALSE(watch.observe(0.0, 64));
  CHECK_FALSE(watch.observe(100.0, 64));  // the first positive one is the lowest
  CHECK_FALSE(watch.observe(999.0, 64));
  CHECK(watch.observe(1001.0, 64));
}

TEST_CASE("after forget() the loss starts anew, the factor is checked") {
  rt::DivergenceWatch watch(4.0);
  CHECK_FALSE(watch.observe(1.0, 64));
  watch.forget();
  CHECK_FALSE(watch.observe(5.0, 64));  // 5x the lowest forgotten: no alarm
  CHECK(watch.observe(21.0, 64));
  CHECK_THROWS_AS(rt::DivergenceWatch(1.0), std::invalid_argument);
  CHECK_THROWS_AS(rt::DivergenceWatch(std::numeric_limits<double>::infinity()), std::invalid_argument);
}
