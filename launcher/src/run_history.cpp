#include "dlrun/launcher/run_history.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <fstream>
#include <functional>

#include "dlrun/launcher/fd_io.hpp"
#include "dlrun/launcher/text.hpp"
#include "dlrun/protocol.hpp"
#include "goodput/goodput_model.hpp"
#include "goodput/gradient_noise_scale.hpp"

namespace dlrun::launcher {
namespace {

double value_or(const std::optional<double>& v, double fallback) {
  return v ? *v : fallback;
}

// Whether every line has a length in time: its own "seconds", or a "time" to take the
// difference of (else the run is drawn and summed up by step).
bool all_timed(const std::vector<MetricsSnapshot>& points) {
  return !points.empty() &&
         std::all_of(points.begin(), points.end(),
                     [](const auto& p) { return p.seconds.has_value() || p.time.has_value(); });
}

// The seconds each line covers (interval_seconds).
std::vector<double> line_seconds(const std::vector<MetricsSnapshot>& points) {
  std::vector<double> out;
  for (size_t i = 0; i < points.size(); ++i)
    out.push_back(interval_seconds(i > 0 ? &points[i - 1] : nullptr, points[i]));
  return out;
}

// The run's own time at each line (the seconds summed: what passed between a run and its
// resume does not count), or the step where the lines have no time.
std::vector<double> x_values(const std::vector<MetricsSnapshot>& points) {
  if (!all_timed(points)) {
    std::vector<double> x;
    for (const auto& p : points) x.push_back(value_or(p.step, 0));
    return x;
  }
  std::vector<double> x = line_seconds(points);
  for (size_t i = 1; i < x.size(); ++i) x[i] += x[i - 1];
  return x;
}

// A line whose interval began this long after the line before it was written starts a new
// process: a restart from a checkpoint (a resume, a resize, a requeue). Within one process the
// two differ by the time between two clock reads; a new process takes longer than this to
// start and load its checkpoint.
constexpr double k_restart_gap_seconds = 0.25;

// Where on the run's own time it restarted (the x of the last line before each restart).
std::vector<double> restarts(const std::vector<MetricsSnapshot>& points,
                             const std::vector<double>& x) {
  std::vector<double> out;
  for (size_t i = 1; i < points.size(); ++i) {
    const auto& p = points[i];
    const auto& before = points[i - 1];
    if (p.seconds && p.time && before.time &&
        *p.time - *p.seconds - *before.time > k_restart_gap_seconds) {
      out.push_back(x[i - 1]);
    }
  }
  return out;
}

std::string number(double v) {
  const double a = std::abs(v);
  if (!std::isfinite(v)) return std::isnan(v) ? "not finite" : (v > 0 ? "infinite" : "-infinite");
  // Short past a million, unless a whole number below 10^12 (a batch, a step) says more whole.
  if (a >= 1e12 || (a >= 1e6 && v != std::round(v))) return fmt::format("{:.3g}", v);
  if (a >= 100 || v == std::round(v)) return fmt::format("{:.0f}", v);
  if (a >= 10) return fmt::format("{:.1f}", v);
  return fmt::format("{:.2g}", v);
}

// A noise scale at its ceiling: the mean gradient lost in its noise (docs/adaptive.md).
bool unbounded(double noise_scale) {
  return noise_scale >= runtime::k_unbounded_noise_scale;
}

std::string noise_text(double noise_scale) {
  return unbounded(noise_scale) ? "unbounded" : number(noise_scale);
}

struct Panel {
  const char* label;
  std::function<std::optional<double>(const MetricsSnapshot&)> value;
  bool log_scale;
  bool steps;  // drawn as a step function: a line's value held over the interval before it
};

constexpr double k_width = 760, k_left = 80, k_right = 20, k_top = 44, k_panel = 130, k_gap = 46;

std::string svg_panel(const std::vector<MetricsSnapshot>& points, const std::vector<double>& x,
                      double x_max, const Panel& panel, double top) {
  const double plot_width = k_width - k_left - k_right;
  std::vector<std::pair<double, double>> values;
  for (size_t i = 0; i < points.size(); ++i) {
    auto v = panel.value(points[i]);
    if (v && std::isfinite(*v) && (!panel.log_scale || *v > 0)) values.emplace_back(x[i], *v);
  }
  std::string out = fmt::format(
      "<rect x=\"{:.0f}\" y=\"{:.0f}\" width=\"{:.0f}\" height=\"{:.0f}\" fill=\"none\" "
      "stroke=\"#999\"/>\n"
      "<text x=\"{:.0f}\" y=\"{:.0f}\" font-weight=\"bold\">{}</text>\n",
      k_left, top, plot_width, k_panel, k_left, top - 6, panel.label);
  if (values.empty()) {
    return out + fmt::format("<text x=\"{:.0f}\" y=\"{:.0f}\">not recorded</text>\n", k_left + 10,
                             top + k_panel / 2);
  }
  auto [lo_it, hi_it] =
      std::minmax_element(values.begin(), values.end(),
                          [](const auto& a, const auto& b) { return a.second < b.second; });
  double lo = lo_it->second, hi = hi_it->second;
  auto scale = [&](double v) { return panel.log_scale ? std::log2(v) : v; };
  double s_lo = panel.log_scale ? scale(lo) - 0.5 : 0,
         s_hi = panel.log_scale ? scale(hi) + 0.5 : hi * 1.1;
  if (s_hi <= s_lo) s_hi = s_lo + 1;
  auto px = [&](double v) { return k_left + plot_width * (x_max > 0 ? v / x_max : 0); };
  auto py = [&](double v) { return top + k_panel - k_panel * (scale(v) - s_lo) / (s_hi - s_lo); };
  std::string path;
  for (size_t i = 0; i < values.size(); ++i) {
    const auto& [t, v] = values[i];
    // A metrics line covers the steps since the one before (the first: since the start), trained
    // at its batch: the batch drawn one interval late made every switch look later than it was.
    if (panel.steps) path += fmt::format(" {:.1f},{:.1f}", px(i == 0 ? 0.0 : values[i - 1].first), py(v));
    path += fmt::format(" {:.1f},{:.1f}", px(t), py(v));
  }
  out += fmt::format(
      "<polyline fill=\"none\" stroke=\"#1f77b4\" stroke-width=\"2\" points=\"{}\"/>\n", path);
  if (values.size() == 1) {  // a line of one point draws nothing
    out += fmt::format("<circle cx=\"{:.1f}\" cy=\"{:.1f}\" r=\"3\" fill=\"#1f77b4\"/>\n",
                       px(values[0].first), py(values[0].second));
  }
  for (double v : {lo, hi}) {
    out += fmt::format("<text x=\"{:.0f}\" y=\"{:.0f}\" text-anchor=\"end\">{}</text>\n",
                       k_left - 6, py(v) + 4, number(v));
  }
  return out;
}

}  // namespace

std::vector<BatchPhase> batch_phases(const std::vector<MetricsSnapshot>& points) {
  std::vector<BatchPhase> phases;
  struct Counts {
    int samples_per_sec = 0, goodput = 0;
  };
  std::vector<Counts> counts;  // per phase: the lines that recorded each mean's value
  const std::vector<double> dt = line_seconds(points);
  for (size_t i = 0; i < points.size(); ++i) {
    const auto& p = points[i];
    if (!p.global_batch) continue;
    const double replicas = value_or(p.replicas, 0);
    if (phases.empty() || phases.back().global_batch != *p.global_batch ||
        phases.back().replicas != replicas) {
      phases.push_back({*p.global_batch, replicas, value_or(p.step, 0), value_or(p.step, 0), 0});
      counts.emplace_back();
    }
    auto& phase = phases.back();
    phase.last_step = value_or(p.step, phase.last_step);
    phase.seconds += dt[i];  // a line covers the interval before it, trained at its batch
    if (p.samples_per_sec && std::isfinite(*p.samples_per_sec)) {
      phase.samples_per_sec += *p.samples_per_sec;
      ++counts.back().samples_per_sec;
    }
    if (p.goodput && std::isfinite(*p.goodput)) {
      phase.goodput += *p.goodput;
      ++counts.back().goodput;
    }
    if (p.noise_scale) phase.noise_scale = *p.noise_scale;
  }
  for (size_t k = 0; k < phases.size(); ++k) {
    if (counts[k].samples_per_sec > 0) phases[k].samples_per_sec /= counts[k].samples_per_sec;
    if (counts[k].goodput > 0) phases[k].goodput /= counts[k].goodput;
  }
  return phases;
}

std::string history_summary(const std::vector<MetricsSnapshot>& points,
                            std::optional<double> predicted) {
  const auto phases = batch_phases(points);
  if (phases.empty()) return "no metrics recorded (metrics.jsonl has no lines with a batch size)\n";
  const bool timed = all_timed(points);
  std::string out =
      fmt::format("{:>8}  {:>5}  {:>13}  {:>8}  {:>10}  {:>10}  {:>11}\n", "batch", "ranks",
                  "steps", timed ? "seconds" : "", "samples/s", "goodput/s", "noise scale");
  for (const auto& p : phases) {
    out += fmt::format("{:>8.0f}  {:>5.0f}  {:>13}  {:>8}  {:>10.0f}  {:>10.0f}  {:>11}\n",
                       p.global_batch, p.replicas,
                       fmt::format("{:.0f}-{:.0f}", p.first_step, p.last_step),
                       timed ? fmt::format("{:.1f}", p.seconds) : "", p.samples_per_sec, p.goodput,
                       noise_text(p.noise_scale));
  }
  int switches = 0;
  for (size_t k = 1; k < phases.size(); ++k)
    switches += phases[k].global_batch != phases[k - 1].global_batch;
  const auto& last = phases.back();
  std::optional<double> first_noise;
  for (const auto& p : points) {
    if (p.noise_scale && *p.noise_scale > 0) {
      first_noise = p.noise_scale;
      break;
    }
  }
  out += fmt::format("batch size: {} at first, {} at the end ({} change{})\n",
                     number(phases.front().global_batch), number(last.global_batch), switches,
                     switches == 1 ? "" : "s");
  if (first_noise) {
    out += fmt::format(
        "noise scale: {} at first, {} at the end (a batch well below it wastes little; far "
        "above it, samples are worth less)\n",
        unbounded(*first_noise) ? noise_text(*first_noise) : number(*first_noise) + " samples",
        noise_text(last.noise_scale));
  }
  // AdaptiveBatch's noise floor (docs/adaptive.md): what the loss did, and where the noise
  // held the last batch. Lines from before it have neither (0 until measured).
  std::optional<double> first_loss, last_loss;
  double last_floor = 0;  // 0: none on the line of the last loss
  for (const auto& p : points) {
    // A loss not finite (null in the file) is the run's latest too: it diverged.
    if (p.loss && (*p.loss > 0 || std::isnan(*p.loss))) {
      if (!first_loss && std::isfinite(*p.loss)) first_loss = p.loss;
      last_loss = p.loss;
      last_floor = 0;  // a floor from an earlier line is not this loss's
    }
    if (p.noise_floor && *p.noise_floor > 0 && std::isfinite(*p.noise_floor))
      last_floor = *p.noise_floor;
  }
  if (last_loss && !std::isfinite(*last_loss)) {
    out += fmt::format(
        "training loss: {}, not finite at the end: the run diverged (docs/adaptive.md, \"A loss "
        "that runs away\")\n",
        first_loss ? number(*first_loss) + " at first" : "never finite");
  } else if (first_loss) {
    out += fmt::format("training loss: {} at first, {} at the end", number(*first_loss),
                       number(*last_loss));
    out += last_floor > 0 ? fmt::format(
                            "; noise floor {} (what the gradient noise holds the batch "
                            "at: a larger batch lowers it)\n",
                            number(last_floor))
                      : "\n";
  }
  if (const auto r = restarts(points, x_values(points)); !r.empty()) {
    out += fmt::format(
        "resumed from a checkpoint: {} (after a restart, a resize, a resume or a requeue; the time "
        "between two runs is not counted)\n",
        r.size() == 1 ? std::string("once") : fmt::format("{} times", r.size()));
  }
  if (predicted) {
    out += fmt::format(
        "goodput at the end: {:.0f}/s measured, {:.0f}/s predicted by the published model at "
        "{:.0f} "
        "rank(s) and its best batch\n",
        last.goodput, *predicted, last.replicas);
  }
  return out;
}

std::string render_history_svg(const std::vector<MetricsSnapshot>& points,
                               const std::string& title) {
  const std::vector<double> x = x_values(points);
  const double x_max = x.empty() ? 0 : *std::max_element(x.begin(), x.end());
  const bool timed = all_timed(points);
  const bool any_unbounded = std::any_of(points.begin(), points.end(), [](const auto& p) {
    return p.noise_scale && unbounded(*p.noise_scale);
  });
  const Panel panels[] = {
      {"global batch size (log scale)", [](const MetricsSnapshot& p) { return p.global_batch; },
       true, true},
      {"goodput (samples/s at the initial batch's efficiency)",
       [](const MetricsSnapshot& p) { return p.goodput; }, false, false},
      {any_unbounded ? "gradient noise scale (samples; unbounded at times, not drawn)"
                     : "gradient noise scale (samples)",
       [](const MetricsSnapshot& p) {
         return p.noise_scale && unbounded(*p.noise_scale) ? std::nullopt : p.noise_scale;
       },
       false, false},
  };
  const double height = k_top + 3 * (k_panel + k_gap) + 10;
  std::string out = fmt::format(
      "<?xml version=\"1.0\" encoding=\"UTF-8\"?>\n"
      "<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"{0:.0f}\" height=\"{1:.0f}\" viewBox=\"0 "
      "0 {0:.0f} "
      "{1:.0f}\" font-family=\"sans-serif\" font-size=\"12\">\n"
      "<rect width=\"100%\" height=\"100%\" fill=\"white\"/>\n"
      "<text x=\"10\" y=\"20\" font-size=\"15\" font-weight=\"bold\">{2}</text>\n",
      k_width, height, xml_text(title));
  double top = k_top;
  for (const auto& panel : panels) {
    out += svg_panel(points, x, x_max, panel, top);
    top += k_panel + k_gap;
  }
  const double axis = top - k_gap + 16;
  const double plot_width = k_width - k_left - k_right;
  for (double at : restarts(points, x)) {
    // Each restart: a dashed line through the three panels.
    const double px = k_left + plot_width * (x_max > 0 ? at / x_max : 0);
    out += fmt::format(
        "<line x1=\"{0:.1f}\" y1=\"{1:.0f}\" x2=\"{0:.1f}\" y2=\"{2:.0f}\" stroke=\"#d62728\" "
        "stroke-dasharray=\"4 3\"/>\n"
        "<text x=\"{0:.1f}\" y=\"{3:.0f}\" fill=\"#d62728\" text-anchor=\"middle\">resumed</text>\n",
        px, k_top, top - k_gap, k_top + 12);
  }
  for (double f : x_max > 0 ? std::vector<double>{0.0, 0.5, 1.0} : std::vector<double>{0.0}) {
    out += fmt::format("<text x=\"{:.0f}\" y=\"{:.0f}\" text-anchor=\"middle\">{}{}</text>\n",
                       k_left + f * plot_width, axis, number(f * x_max), timed ? " s" : "");
  }
  out += fmt::format("<text x=\"{:.0f}\" y=\"{:.0f}\" text-anchor=\"middle\">{}</text>\n",
                     k_left + plot_width / 2, axis + 16,
                     timed ? "seconds of the run (the time between restarts left out)" : "step");
  return out + "</svg>\n";
}

std::vector<MetricsSnapshot> read_run_history(const std::string& run_dir) {
  std::vector<MetricsSnapshot> points;
  std::ifstream in(run_dir + "/metrics.jsonl");
  for (std::string line; std::getline(in, line);) {
    auto p = parse_metrics_line(line);
    if (p.step) points.push_back(p);
  }
  return points;
}

std::optional<double> predicted_goodput(const std::string& run_dir, int replicas) {
  auto text = read_file(run_dir + "/" + run_files::k_goodput_model);
  if (!text || replicas < 1) return std::nullopt;
  auto model = runtime::parse_goodput_model(*text);
  if (!model) return std::nullopt;
  return runtime::predict_goodput(*model, replicas);
}

}  // namespace dlrun::launcher
