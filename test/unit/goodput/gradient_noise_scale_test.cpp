#include "goodput/gradient_noise_scale.hpp"

#include <doctest/doctest.h>

#include <cmath>
#include <limits>
#include <random>
#include <stdexcept>
#include <vector>

using dlrun::runtime::GradientNoiseScale;

namespace {

// One parameter group with a known true gradient G and per-sample covariance σ²·I.
struct Group {
  std::vector<double> mean;
  double sigma2;
  double sqr() const {
    double sum = 0;
    for (double g : mean) sum += g * g;
    return sum;
  }
  double var() const { return sigma2 * static_cast<double>(mean.size()); }
};

Group group_a() {
  return {std::vector<double>(100, 0.1), 0.5};
}  // |G|² = 1, tr(Σ) = 50

Group group_b() {  // |G|² = 6, tr(Σ) = 300
  std::vector<double> mean(150);
  for (size_t i = 0; i < mean.size(); ++i) mean[i] = i % 2 == 0 ? 0.2 : -0.2;
  return {mean, 2.0};
}

// Feeds `steps` measurements: each step draws `count` local gradients, each the mean of
// `local_batch` samples (G + noise of covariance Σ / local_batch).
void feed(GradientNoiseScale& gns, const std::vector<Group>& groups, int count, double local_batch,
          int steps, std::mt19937_64& rng) {
  std::normal_distribution<double> normal;
  for (int step = 0; step < steps; ++step) {
    std::vector<double> local_sqr, total_sqr;
    for (const Group& group : groups) {
      const double sd = std::sqrt(group.sigma2 / local_batch);
      std::vector<double> sum(group.mean.size(), 0.0);
      double local = 0;
      for (int k = 0; k < count; ++k) {
        for (size_t i = 0; i < group.mean.size(); ++i) {
          const double g = group.mean[i] + sd * normal(rng);
          local += g * g;
          sum[i] += g;
        }
      }
      double total = 0;
      for (double s : sum) total += (s / count) * (s / count);
      local_sqr.push_back(local / count);
      total_sqr.push_back(total);
    }
    REQUIRE(gns.observe(local_sqr, total_sqr, local_batch, count));
  }
}

}  // namespace

TEST_SUITE("runtime::GradientNoiseScale") {
  TEST_CASE("estimates |G|² and tr(Σ) within 10% from two gradients per step") {
    std::mt19937_64 rng(42);
    const Group a = group_a();
    GradientNoiseScale gns(1, 32);
    feed(gns, {a}, 2, 16, 1000, rng);
    CHECK(gns.sqr() == doctest::Approx(a.sqr()).epsilon(0.10));
    CHECK(gns.var() == doctest::Approx(a.var()).epsilon(0.10));
    CHECK(gns.noise_scale() == doctest::Approx(a.var() / a.sqr()).epsilon(0.15));
  }

  TEST_CASE("estimates |G|² and tr(Σ) within 10% from four gradients per step") {
    std::mt19937_64 rng(7);
    const Group a = group_a();
    GradientNoiseScale gns(1, 64);
    feed(gns, {a}, 4, 16, 1000, rng);
    CHECK(gns.sqr() == doctest::Approx(a.sqr()).epsilon(0.10));
    CHECK(gns.var() == doctest::Approx(a.var()).epsilon(0.10));
  }

  TEST_CASE("each parameter group gets its own estimate, and the totals are their sums") {
    std::mt19937_64 rng(1234);
    const Group a = group_a(), b = group_b();
    GradientNoiseScale gns(2, 32);
    feed(gns, {a, b}, 2, 16, 1000, rng);
    REQUIRE(gns.groups() == 2);
    CHECK(gns.sqr(0) == doctest::Approx(a.sqr()).epsilon(0.10));
    CHECK(gns.var(0) == doctest::Approx(a.var()).epsilon(0.10));
    CHECK(gns.sqr(1) == doctest::Approx(b.sqr()).epsilon(0.10));
    CHECK(gns.var(1) == doctest::Approx(b.var()).epsilon(0.10));
    CHECK(gns.sqr() == doctest::Approx(gns.sqr(0) + gns.sqr(1)));
    CHECK(gns.var() == doctest::Approx(gns.var(0) + gns.var(1)));
    CHECK(gns.sqr() == doctest::Approx(a.sqr() + b.sqr()).epsilon(0.10));
    CHECK(gns.var() == doctest::Approx(a.var() + b.var()).epsilon(0.10));
  }

  TEST_CASE("nothing is estimated before the first observation") {
    GradientNoiseScale gns(1, 32);
    CHECK_FALSE(gns.ready());
    CHECK(gns.sqr() == 0);
    CHECK(gns.var() == 0);
    CHECK(gns.noise_scale() == 0);
    CHECK(gns.gain(8) == 1);
  }

  TEST_CASE("the first observation is reported unbiased, not shrunk towards zero") {
    GradientNoiseScale gns(1, 20);
    // b = 10, B = 20: var = (3 − 2) / (1/10 − 1/20) = 20, sqr = 2 − 20/20 = 1.
    REQUIRE(gns.observe({3.0}, {2.0}, 10, 2));
    CHECK(gns.ready());
    CHECK(gns.sqr() == doctest::Approx(1.0));
    CHECK(gns.var() == doctest::Approx(20.0));
    CHECK(gns.noise_scale() == doctest::Approx(20.0));
    CHECK(gns.state().observations == 1);
  }

  TEST_CASE("a measurement that stands for k steps weighs as much as k measured steps") {
    // Measured every step, twice the same values, then 1 step of others; measured every other
    // step (steps = 2), once, then the others: both averages forget the same.
    GradientNoiseScale every(1, 20, 0.9), every_other(1, 20, 0.9);
    REQUIRE(every.observe({3.0}, {2.0}, 10, 2));
    REQUIRE(every.observe({3.0}, {2.0}, 10, 2));
    REQUIRE(every.observe({5.0}, {3.0}, 10, 2));
    REQUIRE(every_other.observe({3.0}, {2.0}, 10, 2, 2));
    REQUIRE(every_other.observe({5.0}, {3.0}, 10, 2, 1));
    CHECK(every_other.state().weight == doctest::Approx(every.state().weight));
    CHECK(every_other.sqr() == doctest::Approx(every.sqr()));
    CHECK(every_other.var() == doctest::Approx(every.var()));
    CHECK(every_other.state().observations == 2);
    CHECK_THROWS_AS(every.observe({3.0}, {2.0}, 10, 2, 0.5), std::invalid_argument);
  }

  TEST_CASE("non-finite measurements are ignored") {
    GradientNoiseScale gns(1, 20);
    REQUIRE(gns.observe({3.0}, {2.0}, 10, 2));
    const double nan = std::numeric_limits<double>::quiet_NaN();
    const double inf = std::numeric_limits<double>::infinity();
    CHECK_FALSE(gns.observe({nan}, {2.0}, 10, 2));
    CHECK_FALSE(gns.observe({3.0}, {inf}, 10, 2));
    CHECK(gns.state().observations == 1);
    CHECK(gns.sqr() == doctest::Approx(1.0));
    CHECK(gns.var() == doctest::Approx(20.0));
  }

  TEST_CASE("invalid measurements are rejected") {
    GradientNoiseScale gns(2, 20);
    CHECK_THROWS_AS(gns.observe({1.0}, {1.0}, 10, 2), std::invalid_argument);
    CHECK_THROWS_AS(gns.observe({1.0, 1.0}, {1.0, 1.0}, 10, 1), std::invalid_argument);
    CHECK_THROWS_AS(gns.observe({1.0, 1.0}, {1.0, 1.0}, 0.5, 2), std::invalid_argument);
    CHECK_THROWS_AS(GradientNoiseScale(0, 20), std::invalid_argument);
    CHECK_THROWS_AS(GradientNoiseScale(1, 20, 1.0), std::invalid_argument);
  }

  TEST_CASE("noise scale is var over sqr") {
    std::mt19937_64 rng(3);
    GradientNoiseScale gns(2, 32);
    feed(gns, {group_a(), group_b()}, 2, 16, 50, rng);
    CHECK(gns.noise_scale() == doctest::Approx(gns.var() / gns.sqr()));
  }

  TEST_CASE("gain is 1 at the base batch and between 1 and the scale above it") {
    std::mt19937_64 rng(5);
    GradientNoiseScale gns(1, 32);
    feed(gns, {group_a()}, 2, 16, 100, rng);
    CHECK(gns.gain(1) == 1.0);
    for (double scale : {2.0, 4.0, 16.0, 256.0}) {
      CHECK(gns.gain(scale) >= 1.0);
      CHECK(gns.gain(scale) <= scale);
    }
    // (var/base + sqr) / (var/(base·scale) + sqr) with var = 50, sqr = 1, base = 32 ≈ 2.05.
    const double v = gns.var(), s = gns.sqr();
    CHECK(gns.gain(4) == doctest::Approx((v / 32 + s) / (v / 128 + s)));
  }

  TEST_CASE("gain approaches the scale when noise dominates and 1 when the gradient does") {
    GradientNoiseScale noisy(1, 10);
    // var = (1001 − 500.5) / (1/10 − 1/20) ≈ 1e4, sqr = total − var/20 ≈ 2e-6.
    REQUIRE(noisy.observe({1001.0}, {500.5 + 1e-6}, 10, 2));
    CHECK(noisy.gain(8) == doctest::Approx(8.0).epsilon(0.01));
    GradientNoiseScale clean(1, 10);
    REQUIRE(clean.observe({5.0}, {5.0}, 10, 2));  // var = 0
    CHECK(clean.gain(8) == doctest::Approx(1.0));
  }

  TEST_CASE("a serialized state restores identical estimates") {
    std::mt19937_64 rng(11);
    GradientNoiseScale gns(2, 32);
    feed(gns, {group_a(), group_b()}, 2, 16, 200, rng);
    GradientNoiseScale restored(2, 32);
    restored.deserialize(gns.serialize());
    CHECK(restored.state().observations == gns.state().observations);
    CHECK(restored.state().weight == gns.state().weight);
    for (size_t g = 0; g < 2; ++g) {
      CHECK(restored.sqr(g) == gns.sqr(g));
      CHECK(restored.var(g) == gns.var(g));
    }
    CHECK(restored.gain(4) == gns.gain(4));
    CHECK(restored.serialize() == gns.serialize());
  }

  TEST_CASE("a state from another model or a corrupt one is refused") {
    GradientNoiseScale one(1, 32), two(2, 32);
    REQUIRE(one.observe({3.0}, {2.0}, 10, 2));
    CHECK_THROWS_AS(two.deserialize(one.serialize()), std::invalid_argument);
    CHECK_THROWS_AS(two.restore(one.state()), std::invalid_argument);
    CHECK_THROWS_AS(one.deserialize("weight x\nobservations 1\n"), std::invalid_argument);
    CHECK_THROWS_AS(one.deserialize("colour blue\n"), std::invalid_argument);
    CHECK_THROWS_AS(one.deserialize(""), std::invalid_argument);
  }
}
