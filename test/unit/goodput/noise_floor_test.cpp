#include "goodput/noise_floor.hpp"

#include <doctest/doctest.h>

#include <cmath>
#include <limits>
#include <stdexcept>

namespace rt = dlrun::runtime;

namespace {

// A fixed cost per step: larger batches are faster per sample (as in goodput_test.cpp).
rt::ThroughputParams params() {
  rt::ThroughputParams p;
  p.alpha_c = 0.05, p.beta_c = 0.001;
  p.alpha_n = 0.02, p.beta_n = 0.005;
  p.alpha_r = 0.08, p.beta_r = 0.01;
  p.gamma = 1.5;
  return p;
}

rt::BatchLimits limits(int64_t max_batch) {
  rt::BatchLimits l;
  l.initial_batch = 64;
  l.max_batch = max_batch;
  return l;
}

// The square-root rule: the rate at B is lr0 · √(B/64), so the floor falls as 1/√B.
double sqrt_rule_floor(double batch) {
  return rt::noise_floor(2e-3 * std::sqrt(batch / 64), 1e4, batch);
}

rt::GoodputPoint at(int64_t global_batch, double noise_scale) {
  rt::StepShape shape;
  shape.replicas = 2;
  shape.micro_batch = global_batch / 2;
  return rt::evaluate(params(), noise_scale, 64, shape, rt::EfficiencyModel::adam);
}

}  // namespace

TEST_SUITE("runtime::NoiseFloor") {
  TEST_CASE("the floor is lr x variance / (4 x batch), and 0 for inputs that are not positive") {
    CHECK(rt::noise_floor(2e-3, 1e4, 64) == doctest::Approx(2e-3 * 1e4 / 256));
    CHECK(rt::noise_floor(0.08, 80, 1024) == doctest::Approx(0.08 * 80 / 4096));
    // Four times the batch at twice the rate (the square-root rule): half the floor.
    CHECK(sqrt_rule_floor(256) == doctest::Approx(sqrt_rule_floor(64) / 2));
    const double nan = std::numeric_limits<double>::quiet_NaN();
    CHECK(rt::noise_floor(0, 1e4, 64) == 0);
    CHECK(rt::noise_floor(2e-3, -1, 64) == 0);
    CHECK(rt::noise_floor(2e-3, nan, 64) == 0);
    CHECK(rt::noise_floor(2e-3, 1e4, 0) == 0);
  }

  TEST_CASE("the loss's fall per second comes from the last two intervals at the same batch") {
    rt::LossTrend trend;
    CHECK_FALSE(trend.fall_rate(64).has_value());
    trend.add(0, 2, 1.0, 64);
    CHECK_FALSE(trend.fall_rate(64).has_value());  // one interval: no trend yet
    trend.add(2, 4, 0.8, 64);
    REQUIRE(trend.fall_rate(64).has_value());
    CHECK(*trend.fall_rate(64) == doctest::Approx(0.1));  // 0.2 over the 2 s between middles
    CHECK_FALSE(trend.fall_rate(128).has_value());        // at another batch: nothing known
    trend.add(4, 5, 0.7, 128);                            // the batch changed
    CHECK_FALSE(trend.fall_rate(128).has_value());
    trend.add(5, 6, 0.75, 128);  // a rise counts as no fall
    REQUIRE(trend.fall_rate(128).has_value());
    CHECK(*trend.fall_rate(128) == 0.0);
    // Not finite, or an empty interval: ignored.
    trend.add(6, 7, std::numeric_limits<double>::infinity(), 128);
    trend.add(7, 7, 0.5, 128);
    CHECK(trend.size() == 4);
    CHECK(*trend.fall_rate(128) == 0.0);
    trend.clear();
    CHECK(trend.size() == 0);
  }

  TEST_CASE(
      "while the loss falls fast the choice is Pollux's, and as it levels off, a lower floor "
      "decides") {
    const double phi = 200;
    const rt::GoodputPoint current = at(256, phi);
    rt::FloorInputs in;
    in.current_goodput = current.goodput;
    in.current_batch = 256;
    in.floor_at = sqrt_rule_floor;
    const rt::GoodputPoint pollux =
        rt::choose_batch(params(), phi, 1, 2, limits(4096), rt::EfficiencyModel::adam);
    // The current shape's value is the fall itself.
    in.fall_rate = 0.5;
    CHECK(rt::floor_value(in, current) == doctest::Approx(0.5));
    // A fast fall: the floor is a rounding error next to it.
    in.fall_rate = 1e6;
    const auto fast = rt::choose_batch_with_floor(params(), phi, 1, 2, limits(4096),
                                                  rt::EfficiencyModel::adam, in);
    CHECK(fast.first.shape.global_batch() == pollux.shape.global_batch());
    // No fall left: only a lower floor gains, so the choice is a larger batch than Pollux's
    // (not the largest: a larger one's gain is spread over a longer interval to the next
    // decision).
    in.fall_rate = 0;
    const auto flat = rt::choose_batch_with_floor(params(), phi, 1, 2, limits(4096),
                                                  rt::EfficiencyModel::adam, in);
    CHECK(flat.first.shape.global_batch() > pollux.shape.global_batch());
    CHECK(flat.first.shape.global_batch() > 256);
    CHECK(flat.second > 0);
    // ... and a smaller batch than the current one raises the floor: a loss, not a gain.
    CHECK(rt::floor_value(in, at(128, phi)) < 0);
    // In between, the choice lies between the two.
    in.fall_rate = 0.01;
    const auto mid = rt::choose_batch_with_floor(params(), phi, 1, 2, limits(4096),
                                                 rt::EfficiencyModel::adam, in);
    CHECK(mid.first.shape.global_batch() >= pollux.shape.global_batch());
    CHECK(mid.first.shape.global_batch() <= flat.first.shape.global_batch());
  }

  TEST_CASE("a switch needs a gain against the fall and the current floor, not a rounding") {
    const double phi = 200;
    const rt::GoodputPoint current = at(256, phi);
    rt::FloorInputs in;
    in.current_goodput = current.goodput;
    in.current_batch = 256;
    in.fall_rate = 0;
    // The same floor at every batch (AdaScale where every gradient is noise): a flat loss
    // gains nothing anywhere, and values that differ by rounding move nothing.
    in.floor_at = [](double batch) { return 0.01 + 1e-17 * batch; };
    const auto same = rt::choose_batch_with_floor(params(), phi, 1, 2, limits(4096),
                                                  rt::EfficiencyModel::adam, in);
    CHECK_FALSE(rt::should_switch_with_floor(in, current, same.second, 0.05));
    // A floor that falls with the batch: worth it.
    in.floor_at = sqrt_rule_floor;
    const auto falling = rt::choose_batch_with_floor(params(), phi, 1, 2, limits(4096),
                                                     rt::EfficiencyModel::adam, in);
    CHECK(rt::should_switch_with_floor(in, current, falling.second, 0.05));
    // While the loss falls fast, only a gain of min_improvement of that fall counts.
    in.fall_rate = 1.0;
    CHECK_FALSE(rt::should_switch_with_floor(in, current, 1.04, 0.05));
    CHECK(rt::should_switch_with_floor(in, current, 1.2, 0.05));
  }

  TEST_CASE("bad inputs are refused") {
    rt::FloorInputs in;
    in.current_goodput = 0;
    in.floor_at = sqrt_rule_floor;
    CHECK_THROWS_AS(rt::choose_batch_with_floor(params(), 100, 1, 2, limits(4096),
                                                rt::EfficiencyModel::adam, in),
                    std::invalid_argument);
    in.current_goodput = 1000;
    in.floor_at = nullptr;
    CHECK_THROWS_AS(rt::choose_batch_with_floor(params(), 100, 1, 2, limits(4096),
                                                rt::EfficiencyModel::adam, in),
                    std::invalid_argument);
  }
}
