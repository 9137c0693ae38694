#include "goodput/goodput.hpp"

#include <algorithm>
#include <cmath>
#include <stdexcept>
#include <string>
#include <vector>

namespace dlrun::runtime {

namespace {

constexpr int k_geometric_candidates = 64;  // global batch sizes tried between the limits

void check_limits(int nodes, int replicas, const BatchLimits& limits, int64_t max_micro) {
  auto fail = [](const std::string& what) { throw std::invalid_argument("choose_batch: " + what); };
  if (nodes < 1 || replicas < nodes) {
    fail("needs nodes >= 1 and replicas >= nodes, got " + std::to_string(nodes) + " nodes, " +
         std::to_string(replicas) + " replicas");
  }
  if (limits.initial_batch < 1 || limits.min_micro_batch < 1 || max_micro < 1) {
    fail("initial_batch, min_micro_batch and max_micro_batch must be positive");
  }
  if (max_micro < limits.min_micro_batch) {
    fail("max_micro_batch " + std::to_string(max_micro) + " is below min_micro_batch " +
         std::to_string(limits.min_micro_batch));
  }
  if (limits.max_batch < replicas * limits.min_micro_batch) {
    fail("max_batch " + std::to_string(limits.max_batch) + " is below replicas × " +
         "min_micro_batch = " + std::to_string(replicas * limits.min_micro_batch) +
         ": raise max_batch or lower min_micro_batch");
  }
}

// Global batch sizes from `lower` to `upper`, geometrically spaced, both bounds included.
std::vector<int64_t> candidate_batches(int64_t lower, int64_t upper) {
  std::vector<int64_t> batches{lower, upper};
  const double ratio = static_cast<double>(upper) / static_cast<double>(lower);
  for (int i = 1; i < k_geometric_candidates; ++i) {
    const double fraction = static_cast<double>(i) / k_geometric_candidates;
    batches.push_back(std::llround(static_cast<double>(lower) * std::pow(ratio, fraction)));
  }
  std::sort(batches.begin(), batches.end());
  batches.erase(std::unique(batches.begin(), batches.end()), batches.end());
  return batches;
}

// The shape for about `batch` samples per step: the fewest accumulation steps whose
// micro-batch fits, rounding the micro-batch down so the batch never exceeds the limit.
StepShape shape_for(int64_t batch, int nodes, int replicas, const BatchLimits& limits,
                    int64_t max_micro) {
  StepShape shape;
  shape.nodes = nodes;
  shape.replicas = replicas;
  // batch ≥ replicas × min_micro_batch, so per_replica ≥ min_micro_batch.
  const int64_t per_replica = batch / replicas;
  shape.accum_steps = 1;
  shape.micro_batch = std::min(per_replica, max_micro);
  if (limits.allow_accumulation && per_replica > max_micro) {
    const int64_t accum = (per_replica + max_micro - 1) / max_micro;
    // Splitting may leave micro-batches below the minimum: then stay at one full micro-batch.
    if (per_replica / accum >= limits.min_micro_batch) {
      shape.accum_steps = static_cast<int>(accum);
      shape.micro_batch = per_replica / accum;
    }
  }
  return shape;
}

}  // namespace

std::string_view to_string(EfficiencyModel model) {
  return model == EfficiencyModel::adam ? "adam" : "sgd";
}

std::optional<EfficiencyModel> parse_efficiency_model(std::string_view text) {
  if (text == "sgd") return EfficiencyModel::sgd;
  if (text == "adam") return EfficiencyModel::adam;
  return std::nullopt;
}

double efficiency(double noise_scale, double initial_batch, double batch, EfficiencyModel model) {
  const double phi = std::max(noise_scale, 0.0);
  const double pollux = (phi + initial_batch) / (phi + batch);
  return model == EfficiencyModel::adam ? std::sqrt(pollux) : pollux;
}

double step_worth(EfficiencyModel model, double gain, double scale) {
  if (std::isnan(gain)) return 1.0;
  const double worth =
      model == EfficiencyModel::adam ? std::sqrt(std::max(gain, 0.0) * scale) : gain;
  return std::max(worth, 1.0);
}

GoodputPoint evaluate(const ThroughputParams& params, double noise_scale, double initial_batch,
                      const StepShape& shape, EfficiencyModel model) {
  GoodputPoint point;
  point.shape = shape;
  point.throughput = predict_throughput(params, shape);
  point.efficiency =
      efficiency(noise_scale, initial_batch, static_cast<double>(shape.global_batch()), model);
  point.goodput = point.throughput * point.efficiency;
  return point;
}

std::pair<GoodputPoint, double> choose_batch_by(
    const ThroughputParams& params, double noise_scale, int nodes, int replicas,
    const BatchLimits& limits, EfficiencyModel model,
    const std::function<double(const GoodputPoint&)>& value) {
  const int64_t max_micro = limits.max_micro_batch > 0 ? limits.max_micro_batch : limits.max_batch;
  check_limits(nodes, replicas, limits, max_micro);
  // Below the initial batch the efficiency formula extrapolates past the tuned learning rate:
  // search upwards from it (or from the smallest batch the replicas can hold).
  const int64_t lower = std::max(std::min(limits.initial_batch, limits.max_batch),
                                 int64_t{replicas} * limits.min_micro_batch);
  GoodputPoint best;
  double best_value = 0;
  bool found = false;
  for (int64_t batch : candidate_batches(lower, limits.max_batch)) {
    const StepShape shape = shape_for(batch, nodes, replicas, limits, max_micro);
    const GoodputPoint point =
        evaluate(params, noise_scale, static_cast<double>(limits.initial_batch), shape, model);
    const double v = value(point);
    // Strictly better only: on a tie the smaller batch (seen first) wins.
    if (!found || v > best_value) {
      best = point;
      best_value = v;
      found = true;
    }
  }
  return {best, best_value};
}

GoodputPoint choose_batch(const ThroughputParams& params, double noise_scale, int nodes,
                          int replicas, const BatchLimits& limits, EfficiencyModel model) {
  return choose_batch_by(params, noise_scale, nodes, replicas, limits, model,
                         [](const GoodputPoint& point) { return point.goodput; })
      .first;
}

bool should_switch(const GoodputPoint& current, const GoodputPoint& best, double min_improvement) {
  return best.goodput > 0 && best.goodput >= (1 + min_improvement) * current.goodput;
}

}  // namespace dlrun::runtime
