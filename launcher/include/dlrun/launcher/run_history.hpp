#pragma once
// A training run's history as AdaptiveBatch recorded it (RUN_DIR/metrics.jsonl, one line every
// few steps, docs/adaptive.md#metricsjsonl) and what it decided, for people: `dlrun history`
// prints a summary (the batch sizes it chose, for how many steps and seconds, the noise scale,
// goodput measured against the model's prediction) and draws the run as a picture (batch
// size, goodput and noise scale over time: an SVG a browser opens). Pure except
// read_run_history(); thread-safe.

#include <optional>
#include <string>
#include <vector>

#include "dlrun/launcher/job_metrics.hpp"

namespace dlrun::launcher {

// One stretch of the run at one global batch on one number of ranks.
struct BatchPhase {
  double global_batch = 0;
  double replicas = 0;
  double first_step = 0, last_step = 0;  // of the metrics lines it spans
  double seconds = 0;                    // its lines' seconds (each covers the time before it)
  double samples_per_sec = 0;            // the lines' mean
  double goodput = 0;
  double noise_scale = 0;  // at its last line
};

// The phases of `points` (oldest first), in order; lines without a batch are skipped.
std::vector<BatchPhase> batch_phases(const std::vector<MetricsSnapshot>& points);

// The summary `dlrun history` prints: one line per phase and what the run ended with.
// `predicted_goodput`: the published model's goodput at the run's last rank count and best
// batch (goodput-model.json), when there is one.
std::string history_summary(const std::vector<MetricsSnapshot>& points,
                            std::optional<double> predicted_goodput);

// Three panels over the run's time: global batch (log scale), goodput and noise scale.
std::string render_history_svg(const std::vector<MetricsSnapshot>& points,
                               const std::string& title);

// Every line of RUN_DIR/metrics.jsonl that has a step, oldest first (a resumed run appends
// to the same file: the summary and the picture count each line's own seconds, so the time
// between two runs is left out, and the picture marks each restart). Empty without one.
std::vector<MetricsSnapshot> read_run_history(const std::string& run_dir);

// The goodput the run's published model predicts at `replicas` ranks (its best batch there);
// empty without a readable RUN_DIR/goodput-model.json.
std::optional<double> predicted_goodput(const std::string& run_dir, int replicas);

}  // namespace dlrun::launcher
