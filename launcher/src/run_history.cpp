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

namespace dlrun::launcher {
namespace {

double value_or(const std::optional<double>& v, double fallback) {
  return v ? *v : fallback;
}

// Whether every line has a time (else the run is drawn and summed up by step).
bool all_timed(const std::vector<MetricsSnapshot>& points) {
  return !points.empty() && std::all_of(points.begin(), points.end(),
                                        [](const auto& p) { return p.time.has_value(); });
}

// Seconds since the first line, or the step where the lines have no time.
std::vector<double> x_values(const std::vector<MetricsSnapshot>& points) {
  const bool timed = all_timed(points);
  std::vector<double> x;
  for (const auto& p : points)
    x.push_back(timed ? *p.time - *points.front().time : value_or(p.step, 0));
  return x;
}

std::string number(double v) {
  if (v >= 100 || v == std::round(v)) return fmt::format("{:.0f}", v);
  if (v >= 10) return fmt::format("{:.1f}", v);
  return fmt::format("{:.2g}", v);
}

struct Panel {
  const char* label;
  std::function<std::optional<double>(const MetricsSnapshot&)> value;
  bool log_scale;
  bool steps;  // drawn as a step function (a value holds until the next line)
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
    if (i > 0 && panel.steps)
      path += fmt::format(" {:.1f},{:.1f}", px(t), py(values[i - 1].second));
    path += fmt::format(" {:.1f},{:.1f}", px(t), py(v));
  }
  out += fmt::format(
      "<polyline fill=\"none\" stroke=\"#1f77b4\" stroke-width=\"2\" points=\"{}\"/>\n", path);
  for (double v : {lo, hi}) {
    out += fmt::format("<text x=\"{:.0f}\" y=\"{:.0f}\" text-anchor=\"end\">{}</text>\n",
                       k_left - 6, py(v) + 4, number(v));
  }
  return out;
}

}  // namespace

std::vector<BatchPhase> batch_phases(const std::vector<MetricsSnapshot>& points) {
  std::vector<BatchPhase> phases;
  std::vector<int> lines;  // per phase, for the means
  const std::vector<double> x = x_values(points);
  for (size_t i = 0; i < points.size(); ++i) {
    const auto& p = points[i];
    if (!p.global_batch) continue;
    const double replicas = value_or(p.replicas, 0);
    if (phases.empty() || phases.back().global_batch != *p.global_batch ||
        phases.back().replicas != replicas) {
      if (!phases.empty())
        phases.back().seconds = x[i] - phases.back().seconds;  // start time -> duration
      phases.push_back({*p.global_batch, replicas, value_or(p.step, 0), value_or(p.step, 0), x[i]});
      lines.push_back(0);
    }
    auto& phase = phases.back();
    phase.last_step = value_or(p.step, phase.last_step);
    phase.samples_per_sec += value_or(p.samples_per_sec, 0);
    phase.goodput += value_or(p.goodput, 0);
    if (p.noise_scale) phase.noise_scale = *p.noise_scale;
    ++lines.back();
  }
  if (!phases.empty()) {
    // The last phase lasts to its last line.
    double last_x = 0;
    for (size_t i = points.size(); i-- > 0;) {
      if (points[i].global_batch) {
        last_x = x[i];
        break;
      }
    }
    phases.back().seconds = last_x - phases.back().seconds;
  }
  for (size_t k = 0; k < phases.size(); ++k) {
    phases[k].samples_per_sec /= lines[k];
    phases[k].goodput /= lines[k];
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
                       number(p.noise_scale));
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
        "noise scale: {} samples at first, {} at the end (a batch well below it wastes little; far "
        "above it, samples are worth less)\n",
        number(*first_noise), number(last.noise_scale));
  }
  // AdaptiveBatch's noise floor (docs/adaptive.md): what the loss did, and where the noise
  // held the last batch. Lines from before it have neither (0 until measured).
  std::optional<double> first_loss, last_loss, last_floor;
  for (const auto& p : points) {
    if (p.loss && *p.loss > 0) {
      if (!first_loss) first_loss = p.loss;
      last_loss = p.loss;
    }
    if (p.noise_floor && *p.noise_floor > 0) last_floor = p.noise_floor;
  }
  if (first_loss) {
    out += fmt::format("training loss: {} at first, {} at the end", number(*first_loss),
                       number(*last_loss));
    out += last_floor ? fmt::format(
                            "; noise floor {} (what the gradient noise holds the batch "
                            "at: a larger batch lowers it)\n",
                            number(*last_floor))
                      : "\n";
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
  const Panel panels[] = {
      {"global batch size (log scale)", [](const MetricsSnapshot& p) { return p.global_batch; },
       true, true},
      {"goodput (samples/s at the initial batch's efficiency)",
       [](const MetricsSnapshot& p) { return p.goodput; }, false, false},
      {"gradient noise scale (samples)", [](const MetricsSnapshot& p) { return p.noise_scale; },
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
  for (double f : {0.0, 0.5, 1.0}) {
    out += fmt::format("<text x=\"{:.0f}\" y=\"{:.0f}\" text-anchor=\"middle\">{}{}</text>\n",
                       k_left + f * plot_width, axis, number(f * x_max), timed ? " s" : "");
  }
  out +=
      fmt::format("<text x=\"{:.0f}\" y=\"{:.0f}\" text-anchor=\"middle\">{}</text>\n",
                  k_left + plot_width / 2, axis + 16, timed ? "time since the first line" : "step");
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
