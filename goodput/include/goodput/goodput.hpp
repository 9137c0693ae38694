#pragma once
// Goodput = throughput × statistical efficiency, and the batch-size choice that maximises it
// (Pollux, OSDI'21). Efficiency of a global batch M relative to the initial batch M0, from the
// gradient noise scale φ = tr(Σ)/|G|²: E(M) = (φ + M0) / (φ + M) for an optimizer whose
// learning rate follows AdaScale's gain (SGD), its square root for an adaptive one (Adam)
// whose rate grows with √(M/M0) (docs/adaptive.md derives both), so that
// goodput(M) = throughput(M) × E(M) counts samples per second "as useful as at M0".
// choose_batch() searches global batch sizes between the limits (geometrically spaced, plus the
// bounds) and, for each, the smallest number of accumulation steps whose micro-batch fits the
// micro-batch limit; it returns the best shape. should_switch() says whether moving from the
// current shape to the best is worth it. Pure logic, no I/O. Thread-safe.

#include <cstdint>
#include <functional>
#include <optional>
#include <string_view>
#include <utility>

#include "goodput/throughput_model.hpp"

namespace dlrun::runtime {

// Which statistical efficiency a job's optimizer and learning-rate rule give it.
enum class EfficiencyModel {
  sgd,   // (φ + M0)/(φ + M): the learning rate follows the gain r (AdaScale, Pollux)
  adam,  // √((φ + M0)/(φ + M)): Adam-like, the learning rate × √(M/M0)
};

std::string_view to_string(EfficiencyModel model);
// "sgd" or "adam"; nullopt otherwise.
std::optional<EfficiencyModel> parse_efficiency_model(std::string_view text);

struct BatchLimits {
  int64_t initial_batch = 64;      // global batch at the start (M0, the learning rate's batch)
  int64_t max_batch = 4096;        // largest global batch to consider
  int64_t min_micro_batch = 1;     // smallest per-rank micro-batch
  int64_t max_micro_batch = 0;     // largest per-rank micro-batch (memory); 0: max_batch
  bool allow_accumulation = true;  // may use several micro-steps per optimizer step
};

struct GoodputPoint {
  StepShape shape;
  double throughput = 0;  // samples/s predicted
  double efficiency = 0;  // statistical efficiency relative to the initial batch (1 there)
  double goodput = 0;     // throughput × efficiency
};

// Statistical efficiency of a global batch `batch`, relative to `initial_batch`, for noise
// scale `noise_scale` (samples). 1 at the initial batch; ≤ 1 above it.
double efficiency(double noise_scale, double initial_batch, double batch,
                  EfficiencyModel model = EfficiencyModel::sgd);

// What one step at `scale` × the initial batch is worth in steps at the initial batch, from
// AdaScale's gain ratio r (= scale × the sgd efficiency): r for sgd, √(r · scale) for adam;
// at least 1, and 1 for a NaN gain (so one bad measurement cannot stall progress).
double step_worth(EfficiencyModel model, double gain, double scale);

GoodputPoint evaluate(const ThroughputParams& params, double noise_scale, double initial_batch,
                      const StepShape& shape, EfficiencyModel model = EfficiencyModel::sgd);

// The shape with the highest predicted goodput for this many nodes and replicas. Never
// returns a global batch below min(initial_batch, replicas · min_micro_batch) or above
// max_batch (nor a micro-batch outside the limits). Throws std::invalid_argument on limits
// that allow no shape (e.g. max_batch < replicas · min_micro_batch).
GoodputPoint choose_batch(const ThroughputParams& params, double noise_scale, int nodes,
                          int replicas, const BatchLimits& limits,
                          EfficiencyModel model = EfficiencyModel::sgd);

// The same search, for the shape with the highest `value` of its point (on a tie, the smaller
// batch); returns it and its value. choose_batch is this with value = goodput.
std::pair<GoodputPoint, double> choose_batch_by(
    const ThroughputParams& params, double noise_scale, int nodes, int replicas,
    const BatchLimits& limits, EfficiencyModel model,
    const std::function<double(const GoodputPoint&)>& value);

// True when `best` predicts at least (1 + min_improvement) × the goodput of `current`.
bool should_switch(const GoodputPoint& current, const GoodputPoint& best, double min_improvement);

}  // namespace dlrun::runtime
