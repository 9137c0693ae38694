#include "goodput/goodput.hpp"

#include <doctest/doctest.h>

#include <cmath>
#include <stdexcept>

using dlrun::runtime::BatchLimits;
using dlrun::runtime::GoodputPoint;
using dlrun::runtime::StepShape;
using dlrun::runtime::ThroughputParams;
namespace rt = dlrun::runtime;

namespace {

// A fixed cost per step makes bigger batches faster per sample.
ThroughputParams params() {
  ThroughputParams p;
  p.alpha_c = 0.05, p.beta_c = 0.001;
  p.alpha_n = 0.02, p.beta_n = 0.005;
  p.alpha_r = 0.08, p.beta_r = 0.01;
  p.gamma = 1.5;
  return p;
}

constexpr double k_huge_noise = 1e9;

}  // namespace

TEST_SUITE("runtime::Goodput") {
  TEST_CASE("efficiency is 1 at the initial batch and falls as the batch grows") {
    CHECK(rt::efficiency(100, 64, 64) == 1.0);
    CHECK(rt::efficiency(0, 64, 64) == 1.0);
    CHECK(rt::efficiency(100, 64, 128) == doctest::Approx(164.0 / 228.0));
    CHECK(rt::efficiency(100, 64, 256) < rt::efficiency(100, 64, 128));
    CHECK(rt::efficiency(100, 64, 128) < 1.0);
    CHECK(rt::efficiency(0, 64, 256) == doctest::Approx(0.25));  // no noise: bigger is wasted
    CHECK(rt::efficiency(k_huge_noise, 64, 4096) == doctest::Approx(1.0).epsilon(1e-5));
  }

  TEST_CASE("the adam efficiency is the square root of sgd's") {
    using rt::EfficiencyModel;
    CHECK(rt::efficiency(500, 64, 64, EfficiencyModel::adam) == 1.0);
    CHECK(rt::efficiency(500, 64, 1024, EfficiencyModel::adam) ==
          doctest::Approx(std::sqrt(564.0 / 1524.0)));
    CHECK(rt::efficiency(500, 64, 1024, EfficiencyModel::adam) >
          rt::efficiency(500, 64, 1024, EfficiencyModel::sgd));
    CHECK(rt::efficiency(0, 64, 256, EfficiencyModel::adam) == doctest::Approx(0.5));
    const StepShape shape{1, 4, 256, 1};
    CHECK(rt::evaluate(params(), 500, 64, shape, EfficiencyModel::adam).efficiency ==
          doctest::Approx(std::sqrt(rt::efficiency(500, 64, 1024))));
  }

  TEST_CASE("at the same noise scale the adam efficiency chooses a larger batch") {
    BatchLimits limits;  // initial 64, max 4096
    const auto sgd = rt::choose_batch(params(), 300, 1, 4, limits, rt::EfficiencyModel::sgd);
    const auto adam = rt::choose_batch(params(), 300, 1, 4, limits, rt::EfficiencyModel::adam);
    CHECK(sgd.shape.global_batch() > 64);
    CHECK(adam.shape.global_batch() > sgd.shape.global_batch());
    CHECK(rt::choose_batch(params(), 300, 1, 4, limits).shape.global_batch() ==
          sgd.shape.global_batch());  // sgd is the default
  }

  TEST_CASE("a step's worth in initial-batch steps: the gain, or sqrt(gain x scale) for adam") {
    using rt::EfficiencyModel;
    CHECK(rt::step_worth(EfficiencyModel::sgd, 2.5, 8) == 2.5);
    CHECK(rt::step_worth(EfficiencyModel::adam, 2.0, 8) == doctest::Approx(4.0));
    // Never below one step at the initial batch, and a NaN counts as one.
    CHECK(rt::step_worth(EfficiencyModel::sgd, 0.5, 1) == 1.0);
    CHECK(rt::step_worth(EfficiencyModel::adam, 0.5, 1) == 1.0);
    CHECK(rt::step_worth(EfficiencyModel::sgd, std::nan(""), 4) == 1.0);
    CHECK(rt::step_worth(EfficiencyModel::adam, std::nan(""), 4) == 1.0);
    // Between the gain and the scale, as the efficiencies are ordered.
    CHECK(rt::step_worth(EfficiencyModel::adam, 3.0, 8) > 3.0);
    CHECK(rt::step_worth(EfficiencyModel::adam, 3.0, 8) < 8.0);
  }

  TEST_CASE("efficiency model names round-trip") {
    for (auto model : {rt::EfficiencyModel::sgd, rt::EfficiencyModel::adam}) {
      CHECK(rt::parse_efficiency_model(rt::to_string(model)) == model);
    }
    CHECK_FALSE(rt::parse_efficiency_model("Adam").has_value());
    CHECK_FALSE(rt::parse_efficiency_model("").has_value());
  }

  TEST_CASE("goodput is throughput times efficiency") {
    const StepShape shape{1, 4, 32, 2};
    const GoodputPoint point = rt::evaluate(params(), 500, 64, shape);
    CHECK(point.throughput == doctest::Approx(rt::predict_throughput(params(), shape)));
    CHECK(point.efficiency == doctest::Approx(rt::efficiency(500, 64, 256)));
    CHECK(point.goodput == doctest::Approx(point.throughput * point.efficiency));
  }

  TEST_CASE("a huge noise scale picks the largest batch") {
    BatchLimits limits;  // initial 64, max 4096
    const GoodputPoint best = rt::choose_batch(params(), k_huge_noise, 1, 4, limits);
    CHECK(best.shape.global_batch() == 4096);
    CHECK(best.shape.accum_steps == 1);
    CHECK(best.shape.micro_batch == 1024);
    CHECK(best.shape.replicas == 4);
  }

  TEST_CASE("a vanishing noise scale keeps the initial batch") {
    BatchLimits limits;
    const GoodputPoint best = rt::choose_batch(params(), 0, 1, 4, limits);
    CHECK(best.shape.global_batch() == 64);
    CHECK(best.efficiency == 1.0);
  }

  TEST_CASE("a moderate noise scale beats both extremes") {
    BatchLimits limits;
    const double noise = 400;
    const GoodputPoint best = rt::choose_batch(params(), noise, 2, 8, limits);
    CHECK(best.shape.global_batch() > 64);
    CHECK(best.shape.global_batch() < 4096);
    CHECK(best.goodput > rt::evaluate(params(), noise, 64, StepShape{2, 8, 8, 1}).goodput);
    CHECK(best.goodput > rt::evaluate(params(), noise, 64, StepShape{2, 8, 512, 1}).goodput);
  }

  TEST_CASE("the choice respects the batch limits") {
    BatchLimits limits;
    limits.max_batch = 1000;
    limits.min_micro_batch = 8;
    const GoodputPoint big = rt::choose_batch(params(), k_huge_noise, 1, 3, limits);
    CHECK(big.shape.global_batch() <= 1000);
    CHECK(big.shape.global_batch() >= 990);  // 3 × 333 rounds down below the limit
    const GoodputPoint small = rt::choose_batch(params(), 0, 1, 3, limits);
    CHECK(small.shape.global_batch() >= 24);  // never below min(initial, replicas × min micro)
    CHECK(small.shape.micro_batch >= 8);
    CHECK(small.shape.global_batch() <= 64);
  }

  TEST_CASE("a small memory limit forces gradient accumulation when allowed") {
    BatchLimits limits;
    limits.max_micro_batch = 64;
    const GoodputPoint best = rt::choose_batch(params(), k_huge_noise, 1, 4, limits);
    CHECK(best.shape.micro_batch <= 64);
    CHECK(best.shape.accum_steps > 1);
    CHECK(best.shape.global_batch() == 4096);  // 4 replicas × 64 × 16 steps
  }

  TEST_CASE("without accumulation the batch stops at replicas × max micro-batch") {
    BatchLimits limits;
    limits.max_micro_batch = 64;
    limits.allow_accumulation = false;
    const GoodputPoint best = rt::choose_batch(params(), k_huge_noise, 1, 4, limits);
    CHECK(best.shape.accum_steps == 1);
    CHECK(best.shape.micro_batch == 64);
    CHECK(best.shape.global_batch() == 256);
  }

  TEST_CASE("limits that allow no shape are refused") {
    BatchLimits limits;
    limits.max_batch = 16;
    limits.min_micro_batch = 8;
    CHECK_THROWS_AS(rt::choose_batch(params(), 100, 1, 4, limits), std::invalid_argument);
    BatchLimits inverted;
    inverted.min_micro_batch = 32;
    inverted.max_micro_batch = 16;
    CHECK_THROWS_AS(rt::choose_batch(params(), 100, 1, 4, inverted), std::invalid_argument);
  }

  TEST_CASE("switching needs the promised improvement") {
    GoodputPoint current, best;
    current.goodput = 100;
    best.goodput = 109;
    CHECK_FALSE(rt::should_switch(current, best, 0.10));
    best.goodput = 111;
    CHECK(rt::should_switch(current, best, 0.10));
    CHECK(rt::should_switch(current, best, 0.0));
    best.goodput = 90;
    CHECK_FALSE(rt::should_switch(current, best, 0.0));
  }
}
