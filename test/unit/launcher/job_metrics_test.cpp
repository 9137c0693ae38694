#include "dlrun/launcher/job_metrics.hpp"

#include <doctest/doctest.h>

#include <cmath>

using namespace dlrun::launcher;

namespace {
MetricsSnapshot line(double time, double samples_per_sec, double replicas = 2) {
  MetricsSnapshot m;
  m.time = time;
  m.samples_per_sec = samples_per_sec;
  m.replicas = replicas;
  m.global_batch = 256;
  return m;
}
}  // namespace

TEST_SUITE("launcher::JobMetrics") {
  TEST_CASE("metrics lines give batch size and throughput") {
    auto m = parse_metrics_line(
        R"({"time": 1795434291.5, "step": 120, "replicas": 2, "global_batch": 512, "samples_per_sec": 1834.5, "goodput": 1.2})");
    CHECK(m.step == 120);
    CHECK(m.global_batch == 512);
    CHECK(m.samples_per_sec == 1834.5);
    CHECK(m.goodput == 1.2);
    CHECK(m.time == 1795434291.5);
    CHECK(m.replicas == 2);
    CHECK_FALSE(m.noise_scale);
    CHECK_FALSE(parse_metrics_line("{}").global_batch);
    CHECK_FALSE(parse_metrics_line(R"({"global_batch": "x"})").global_batch);
    CHECK_FALSE(parse_metrics_line(R"({"global_batch": 12)").global_batch);  // half a line
  }
  TEST_CASE("a loss written as null is not finite, not missing, and a line has its own seconds") {
    auto m = parse_metrics_line(
        R"({"step": 30, "global_batch": 64, "loss": null, "noise_floor": null, "seconds": 0.25, "goodput": null})");
    REQUIRE(m.loss);
    CHECK(std::isnan(*m.loss));
    REQUIRE(m.noise_floor);
    CHECK(std::isnan(*m.noise_floor));
    CHECK(m.seconds == 0.25);
    CHECK_FALSE(m.goodput);  // elsewhere null stays "not recorded"
    m = parse_metrics_line(R"({"step": 30, "loss": 0.5})");
    CHECK(m.loss == 0.5);
    CHECK_FALSE(m.noise_floor);
    CHECK_FALSE(m.seconds);
  }
  TEST_CASE("samples/s is the window's samples over its seconds") {
    // Intervals of 1 s at 1000 and 3000 samples/s, alternating: 2000 on average.
    std::vector<MetricsSnapshot> lines;
    for (int i = 0; i < 11; ++i) lines.push_back(line(100 + i, i % 2 ? 1000 : 3000));
    CHECK(*smooth_metrics(lines).samples_per_sec == doctest::Approx(2000));
    // Unequal intervals weigh by their length: 1 s at 1000, 3 s at 3000.
    CHECK(*smooth_metrics({line(0, 5), line(1, 1000), line(4, 3000)}).samples_per_sec == doctest::Approx(2500));
    CHECK(smooth_metrics({}).empty());
    CHECK(*smooth_metrics({line(0, 7)}).samples_per_sec == 7);
  }
  TEST_CASE("a line's own seconds weigh it: a restart's gap within the window is not its time") {
    // 1 s at 1000, 1 s at 1000, then a restart 20 s later and 1 s at 3000.
    std::vector<MetricsSnapshot> lines = {line(100, 1000), line(101, 1000), line(121, 3000)};
    for (auto& l : lines) l.seconds = 1;
    CHECK(*smooth_metrics(lines).samples_per_sec == doctest::Approx(5000.0 / 3));
    for (auto& l : lines) l.seconds.reset();  // from before the field: the gap counts
    CHECK(*smooth_metrics(lines).samples_per_sec == doctest::Approx((1000.0 + 3000 * 20) / 21));
  }
  TEST_CASE("the window is the last 30 s, and never crosses a resize") {
    // 60 s at 100 samples/s, then 30 s at 400: only the newest 30 s count.
    std::vector<MetricsSnapshot> lines;
    for (int t = 0; t <= 90; ++t) lines.push_back(line(t, t <= 60 ? 100 : 400));
    CHECK(*smooth_metrics(lines).samples_per_sec == doctest::Approx(400));
    // After a resize to 4 ranks, only the 4-rank lines.
    lines.push_back(line(91, 900, 4));
    lines.push_back(line(92, 1100, 4));
    CHECK(*smooth_metrics(lines).samples_per_sec == doctest::Approx(1100));  // the interval 91..92
    lines.push_back(line(94, 800, 4));
    CHECK(*smooth_metrics(lines).samples_per_sec == doctest::Approx((1100 + 800 * 2) / 3.0));
    CHECK(smooth_metrics(lines).global_batch == 256);
  }
  TEST_CASE("lines without times: the mean of the newest ten") {
    std::vector<MetricsSnapshot> lines;
    for (int i = 0; i < 20; ++i) {
      MetricsSnapshot m;
      m.samples_per_sec = i < 10 ? 1 : (i % 2 ? 100 : 300);
      lines.push_back(m);
    }
    CHECK(*smooth_metrics(lines).samples_per_sec == doctest::Approx(200));
  }
}
