#include "dlrun/launcher/job_metrics.hpp"

#include <algorithm>
#include <cmath>
#include <fstream>
#include <limits>
#include <nlohmann/json.hpp>

namespace dlrun::launcher {
namespace {

// Enough for the smoothing window: a runtime line is about 300 bytes.
constexpr std::streamoff k_tail_bytes = 16384;

bool same_replicas(const MetricsSnapshot& a, const MetricsSnapshot& b) {
  return a.replicas == b.replicas;
}

}  // namespace

MetricsSnapshot parse_metrics_line(std::string_view line) {
  const auto json = nlohmann::json::parse(line, nullptr, /*allow_exceptions=*/false);
  if (!json.is_object()) return {};
  auto number = [&](const char* key) -> std::optional<double> {
    auto it = json.find(key);
    if (it == json.end() || !it->is_number()) return std::nullopt;
    return it->get<double>();
  };
  // The runtime writes a loss that is not finite as null: NaN here, not "not recorded".
  auto loss_value = [&](const char* key) -> std::optional<double> {
    auto it = json.find(key);
    if (it != json.end() && it->is_null()) return std::numeric_limits<double>::quiet_NaN();
    return number(key);
  };
  MetricsSnapshot p;
  p.global_batch = number("global_batch");
  p.samples_per_sec = number("samples_per_sec");
  p.step = number("step");
  p.goodput = number("goodput");
  p.noise_scale = number("noise_scale");
  p.time = number("time");
  p.replicas = number("replicas");
  p.loss = loss_value("loss");
  p.noise_floor = loss_value("noise_floor");
  p.seconds = number("seconds");
  return p;
}

double interval_seconds(const MetricsSnapshot* before, const MetricsSnapshot& line) {
  double dt = 0;
  if (line.seconds) {
    dt = *line.seconds;
  } else if (before && line.time && before->time) {
    dt = *line.time - *before->time;
  }
  return std::isfinite(dt) ? std::max(0.0, dt) : 0.0;
}

MetricsSnapshot smooth_metrics(const std::vector<MetricsSnapshot>& lines) {
  if (lines.empty()) return {};
  MetricsSnapshot newest = lines.back();
  if (!newest.samples_per_sec) return newest;
  // The window: the newest line and those just before it that measured the same job.
  size_t first = lines.size() - 1;
  bool timed = newest.time.has_value();
  while (first > 0 && static_cast<int>(lines.size() - first) < k_smoothing_lines) {
    const MetricsSnapshot& before = lines[first - 1];
    if (!before.samples_per_sec || !same_replicas(before, newest)) break;
    if (timed && (!before.time || *newest.time - *before.time > k_smoothing_seconds)) break;
    --first;
  }
  if (timed) {
    // Each line's samples/s covers the time since the line before it: samples over seconds.
    double samples = 0, seconds = 0;
    for (size_t i = first; i < lines.size(); ++i) {
      const double dt = interval_seconds(i > first ? &lines[i - 1] : nullptr, lines[i]);
      if (dt <= 0) continue;
      samples += *lines[i].samples_per_sec * dt;
      seconds += dt;
    }
    if (seconds > 0) newest.samples_per_sec = samples / seconds;
    return newest;
  }
  first = std::max(first, lines.size() - std::min<size_t>(lines.size(), k_smoothing_lines_untimed));
  double sum = 0;
  for (size_t i = first; i < lines.size(); ++i) sum += *lines[i].samples_per_sec;
  newest.samples_per_sec = sum / static_cast<double>(lines.size() - first);
  return newest;
}

MetricsSnapshot read_job_metrics(const std::string& run_dir) {
  if (run_dir.empty()) return {};
  std::ifstream file(run_dir + "/metrics.jsonl", std::ios::binary | std::ios::ate);
  if (!file) return {};
  const std::streamoff size = file.tellg();
  const std::streamoff start = std::max<std::streamoff>(0, size - k_tail_bytes);
  file.seekg(start);
  std::string tail(static_cast<size_t>(size - start), '\0');
  file.read(tail.data(), static_cast<std::streamsize>(tail.size()));
  tail.resize(static_cast<size_t>(file.gcount()));
  // Complete lines only: the first may be cut by the start of the tail, the last may be
  // half-written.
  size_t begin = 0;
  if (start > 0) {
    begin = tail.find('\n');
    if (begin == std::string::npos) return {};
    ++begin;
  }
  std::vector<MetricsSnapshot> lines;
  for (size_t end; (end = tail.find('\n', begin)) != std::string::npos; begin = end + 1) {
    MetricsSnapshot line = parse_metrics_line(std::string_view(tail).substr(begin, end - begin));
    if (!line.empty() || line.time) lines.push_back(line);
  }
  return smooth_metrics(lines);
}

}  // namespace dlrun::launcher
