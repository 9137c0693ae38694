#include "dlrun/launcher/run_history.hpp"

#include <doctest/doctest.h>

#include <cmath>
#include <sstream>
#include <string>
#include <vector>

using namespace dlrun::launcher;

namespace {

MetricsSnapshot line(double time, double step, double batch, double replicas, double goodput,
                     double noise) {
  MetricsSnapshot p;
  p.time = time;
  p.step = step;
  p.global_batch = batch;
  p.replicas = replicas;
  p.samples_per_sec = goodput * 1.25;
  p.goodput = goodput;
  p.noise_scale = noise;
  return p;
}

size_t count(const std::string& text, const std::string& what) {
  size_t n = 0;
  for (size_t at = text.find(what); at != std::string::npos; at = text.find(what, at + 1)) ++n;
  return n;
}

}  // namespace

TEST_SUITE("launcher::run_history") {
  TEST_CASE("a run's lines become one phase per batch size and rank count, in order") {
    const std::vector<MetricsSnapshot> points = {
        line(100, 10, 64, 2, 1000, 50),   line(101, 20, 64, 2, 1200, 80),
        line(102, 30, 128, 2, 1500, 120), line(104, 40, 128, 2, 1700, 150),
        line(110, 50, 128, 1, 900, 160),  line(111, 60, 256, 1, 1000, 200)};
    const auto phases = batch_phases(points);
    REQUIRE(phases.size() == 4);
    CHECK(phases[0].global_batch == 64);
    CHECK(phases[0].first_step == 10);
    CHECK(phases[0].last_step == 20);
    CHECK(phases[0].seconds == doctest::Approx(1));  // each line covers the time before it
    CHECK(phases[0].goodput == doctest::Approx(1100));
    CHECK(phases[0].samples_per_sec == doctest::Approx(1375));
    CHECK(phases[0].noise_scale == 80);
    CHECK(phases[1].global_batch == 128);
    CHECK(phases[1].replicas == 2);
    CHECK(phases[1].seconds == doctest::Approx(3));
    CHECK(phases[2].replicas == 1);  // a resize starts a phase at the same batch
    CHECK(phases[3].global_batch == 256);
    CHECK(phases[3].seconds == doctest::Approx(1));
  }

  TEST_CASE(
      "the summary says what it chose, the noise scale, and goodput measured against predicted") {
    const std::vector<MetricsSnapshot> points = {line(100, 10, 64, 2, 1000, 50),
                                                 line(101, 20, 128, 2, 1500, 90),
                                                 line(103, 30, 128, 2, 1600, 120)};
    const std::string text = history_summary(points, 1700.0);
    CHECK(count(text, "\n") == 6);  // header, 2 phases, batch, noise, goodput
    CHECK(text.find(
              "     128      2          20-30       3.0        1938        1550          120\n") !=
          std::string::npos);
    CHECK(text.find("batch size: 64 at first, 128 at the end (1 change)") != std::string::npos);
    CHECK(text.find("noise scale: 50 samples at first, 120 at the end") != std::string::npos);
    CHECK(text.find("goodput at the end: 1550/s measured, 1700/s predicted by the published model "
                    "at 2 rank(s)") != std::string::npos);
    CHECK(history_summary(points, std::nullopt).find("goodput at the end") == std::string::npos);
    CHECK(history_summary({}, std::nullopt).find("no metrics recorded") == 0);
    CHECK(text.find("training loss") == std::string::npos);  // not recorded: not said
  }

  TEST_CASE("the summary says how the training loss went and the noise floor at the end") {
    std::vector<MetricsSnapshot> points = {line(100, 10, 64, 2, 1000, 50),
                                           line(101, 20, 128, 2, 1500, 90),
                                           line(103, 30, 256, 2, 1600, 120)};
    points[0].loss = 0;  // not measured yet
    points[1].loss = 0.52, points[1].noise_floor = 0.11;
    points[2].loss = 0.31, points[2].noise_floor = 0.034;
    const std::string text = history_summary(points, std::nullopt);
    CHECK(text.find("training loss: 0.52 at first, 0.31 at the end; noise floor 0.034") !=
          std::string::npos);
    points[2].noise_floor.reset();
    points[1].noise_floor.reset();
    CHECK(history_summary(points, std::nullopt).find("0.31 at the end\n") != std::string::npos);
  }

  TEST_CASE("a line's own seconds make the run's time: a restart's gap is left out, and marked") {
    // Two runs: the second resumed 100 s after the first's last line. Each line says the
    // seconds since the one before it in its process.
    std::vector<MetricsSnapshot> points = {
        line(100, 10, 64, 2, 1000, 50), line(102, 20, 64, 2, 1000, 60),
        line(203, 30, 128, 2, 1500, 90), line(205, 40, 128, 2, 1500, 90)};
    points[0].seconds = 1, points[1].seconds = 2, points[2].seconds = 1, points[3].seconds = 2;
    const auto phases = batch_phases(points);
    REQUIRE(phases.size() == 2);
    CHECK(phases[0].seconds == doctest::Approx(3));
    CHECK(phases[1].seconds == doctest::Approx(3));  // not the 100 s between the runs
    const std::string text = history_summary(points, std::nullopt);
    CHECK(text.find("resumed from a checkpoint: once (") != std::string::npos);
    const std::string svg = render_history_svg(points, "t");
    CHECK(count(svg, ">resumed</text>") == 1);
    CHECK(svg.find(">6 s</text>") != std::string::npos);  // the axis ends at the run's own 6 s
    // Without a gap: no restart said or drawn.
    points[2].time = 103, points[3].time = 105;
    CHECK(history_summary(points, std::nullopt).find("restart") == std::string::npos);
    CHECK(count(render_history_svg(points, "t"), ">resumed</text>") == 0);
  }

  TEST_CASE("a value a line does not have is left out of a phase's means, not counted as 0") {
    std::vector<MetricsSnapshot> points = {line(100, 10, 64, 2, 1000, 50),
                                           line(101, 20, 64, 2, 2000, 50)};
    points[1].samples_per_sec.reset();
    points[1].goodput.reset();
    const auto phases = batch_phases(points);
    REQUIRE(phases.size() == 1);
    CHECK(phases[0].goodput == doctest::Approx(1000));
    CHECK(phases[0].samples_per_sec == doctest::Approx(1250));
  }

  TEST_CASE("a run whose loss is not finite at the end is said to have diverged") {
    std::vector<MetricsSnapshot> points = {line(100, 10, 64, 2, 1000, 50),
                                           line(101, 20, 64, 2, 1000, 50),
                                           line(102, 30, 64, 2, 1000, 50)};
    points[0].loss = 68643303964588.0, points[0].noise_floor = 1e28;
    points[1].loss = 9.4e28, points[1].noise_floor = 4.7e28;
    points[2].loss = std::nan("");  // null in the file
    std::string text = history_summary(points, std::nullopt);
    CHECK(text.find("training loss: 6.86e+13 at first, not finite at the end: the run diverged") !=
          std::string::npos);
    CHECK(text.find("noise floor") == std::string::npos);  // not the earlier line's
    points.pop_back();  // a huge loss that is still finite: written short
    text = history_summary(points, std::nullopt);
    CHECK(text.find("training loss: 6.86e+13 at first, 9.4e+28 at the end; noise floor 4.7e+28") !=
          std::string::npos);
    points[1].noise_floor = 0;  // the last loss's line has no floor: not the one before it
    text = history_summary(points, std::nullopt);
    CHECK(text.find("9.4e+28 at the end\n") != std::string::npos);
    // A whole number below 10^12 (a batch) is written whole.
    points[1].global_batch = 2097152;
    CHECK(history_summary(points, std::nullopt).find("64 at first, 2097152 at the end") !=
          std::string::npos);
  }

  TEST_CASE("the picture has three panels, and says where a value was never recorded") {
    std::vector<MetricsSnapshot> points = {line(100, 10, 64, 2, 1000, 50),
                                           line(102, 20, 128, 2, 1500, 90)};
    std::string svg = render_history_svg(points, "job 3 <a&b>");
    CHECK(svg.rfind("<?xml", 0) == 0);
    CHECK(count(svg, "<polyline") == 3);
    CHECK(svg.find("job 3 &lt;a&amp;b&gt;") != std::string::npos);
    CHECK(svg.find(">2 s</text>") != std::string::npos);
    CHECK(svg.substr(svg.size() - 7) == "</svg>\n");
    for (auto& p : points) p.noise_scale.reset();
    svg = render_history_svg(points, "t");
    CHECK(count(svg, "<polyline") == 2);
    CHECK(count(svg, "not recorded") == 1);
    // One line: a point is drawn (a polyline of one point shows nothing), one axis label.
    points.resize(1);
    svg = render_history_svg(points, "t");
    CHECK(count(svg, "<circle") == 2);
    CHECK(count(svg, ">0 s</text>") == 1);
  }

  TEST_CASE("the batch is drawn over the interval each line covers, the steps before it") {
    // The line at 102 s says the steps since 100 s trained at 128: the switch is drawn at 100 s
    // (it was drawn one interval late, at 102 s).
    const std::vector<MetricsSnapshot> points = {line(100, 10, 64, 2, 1000, 50), line(102, 20, 128, 2, 1500, 90),
                                                 line(104, 30, 128, 2, 1500, 90)};
    const std::string svg = render_history_svg(points, "t");
    const std::string mark = "points=\"";
    const size_t begin = svg.find(mark) + mark.size();
    std::istringstream in(svg.substr(begin, svg.find('"', begin) - begin));
    std::vector<std::pair<double, double>> xy;
    double x = 0, y = 0;
    char comma = 0;
    while (in >> x >> comma >> y) xy.emplace_back(x, y);
    REQUIRE(xy.size() == 6);
    CHECK(xy[0] == xy[1]);                // 64 over the run's first moment (its line is at 0 s)
    CHECK(xy[2].first == xy[1].first);    // 128 from the first line's time on
    CHECK(xy[2].second < xy[1].second);   // higher on the page
    CHECK(xy[3].second == xy[2].second);
    CHECK(xy[3].first > xy[2].first);
  }

  TEST_CASE("a noise scale at its ceiling reads as unbounded and is left out of the picture") {
    // 1e12: AdaptiveBatch's ceiling, where the mean gradient is lost in its noise.
    const std::vector<MetricsSnapshot> points = {line(100, 10, 64, 2, 1000, 1e12),
                                                 line(101, 20, 128, 2, 1500, 90),
                                                 line(103, 30, 128, 2, 1600, 1e12)};
    const std::string text = history_summary(points, std::nullopt);
    CHECK(text.find("noise scale: unbounded at first, unbounded at the end") !=
          std::string::npos);
    CHECK(text.find("    unbounded\n") != std::string::npos);  // the table's column
    CHECK(text.find("1e+12") == std::string::npos);
    const std::string svg = render_history_svg(points, "t");
    CHECK(svg.find("unbounded at times, not drawn") != std::string::npos);
    CHECK(svg.find("1e+12") == std::string::npos);  // its axis spans the measured values
    CHECK(count(svg, "<polyline") == 3);
    CHECK(count(svg, "<circle") == 1);  // the one measured noise scale, as a point
  }
}
