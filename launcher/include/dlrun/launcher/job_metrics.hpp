#pragma once
// A job's training metrics as `dlrun status` shows them: the lines the runtime's rank 0
// appends to RUN_DIR/metrics.jsonl (docs/adaptive.md#metricsjsonl), the newest one's values
// with its throughput smoothed over the lines just before it (one interval's samples/s jumps
// with every pause of the data loader). The job store keeps the values a job ended with
// (job_store.hpp). Pure except read_job_metrics(); thread-safe.

#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace dlrun::launcher {

struct MetricsSnapshot {
  std::optional<double> global_batch;
  std::optional<double> samples_per_sec;
  std::optional<double> step;
  std::optional<double> goodput;      // dlrun::AdaptiveBatch's (docs/adaptive.md)
  std::optional<double> noise_scale;
  std::optional<double> time;         // Unix seconds of the line
  std::optional<double> replicas;     // ranks when it was written
  std::optional<double> loss;         // mean training loss of the last decision interval
  std::optional<double> noise_floor;  // the loss the gradient noise holds the batch at
  std::optional<double> seconds;      // since the line before it in the same process

  bool empty() const { return !global_batch && !samples_per_sec && !goodput && !noise_scale; }
};

// How far back samples/s is smoothed: the lines of the last k_smoothing_seconds before the
// newest one (by their "time"), at most k_smoothing_lines of them, never across a change of
// "replicas" (a resize or a restart at another size measures another job).
constexpr double k_smoothing_seconds = 30;
constexpr int k_smoothing_lines = 50;
// Lines without a "time": the mean of this many newest ones.
constexpr int k_smoothing_lines_untimed = 10;

// The numbers of one metrics.jsonl line (a JSON object); empty where a field is missing, is
// not a number, or the line is not JSON.
MetricsSnapshot parse_metrics_line(std::string_view json_line);

// The seconds `line` covers: its own "seconds" (since the line before it in its process; a
// restart's gap is not in it), else, for a line from before that field, the time since
// `before` (nullptr: none); 0 where neither says.
double interval_seconds(const MetricsSnapshot* before, const MetricsSnapshot& line);

// The newest of `lines` (oldest first) with samples_per_sec smoothed: the samples the lines
// of the window measured over the time they span (each line's samples/s covers the interval
// since the line before it), or, without times, the mean of the newest lines. Empty for none.
MetricsSnapshot smooth_metrics(const std::vector<MetricsSnapshot>& lines);

// smooth_metrics() of the complete lines at the end of RUN_DIR/metrics.jsonl (only the
// file's tail is read); empty when there is none.
MetricsSnapshot read_job_metrics(const std::string& run_dir);

}  // namespace dlrun::launcher
