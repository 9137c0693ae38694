#pragma once
// What a training job publishes about itself so that a scheduler can predict its goodput at
// any replica count (docs/adaptive.md, "The published model"): the fitted throughput model,
// the gradient noise scale, the batch limits, and which replica counts were measured. The
// runtime's AdaptiveBatch writes it as goodput-model.json in the run directory, atomically,
// each time it re-fits; the launcher's scheduler reads it. Pure, no I/O.

#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "goodput/goodput.hpp"
#include "goodput/throughput_model.hpp"

namespace dlrun::runtime {

struct GoodputModel {
  ThroughputParams params;
  double noise_scale = 0;             // φ in samples; 0: not measured yet
  EfficiencyModel efficiency = EfficiencyModel::sgd;  // how φ turns into efficiency
  BatchLimits limits;                 // initial_batch is the efficiency's reference batch
  std::vector<int> measured_replicas; // replica counts the profile has times for
  // Whether the profile timed the compute without the sync (accumulation micro-steps, or one
  // replica): without it, how much of a step's fixed cost is sync is a guess of the fit.
  bool compute_timed = true;
  int replicas = 1;                   // what the job ran with when it wrote this
  int64_t global_batch = 0;           // the batch it used then
};

std::string to_json(const GoodputModel& model);
// Empty for text that is not a model this version writes (missing or out-of-range fields).
std::optional<GoodputModel> parse_goodput_model(std::string_view text);

// Predicted goodput (samples/s at the reference batch's efficiency) with `replicas` on one
// node, at the best batch there; 0 when the limits allow no batch at that count. Fewer replicas
// than any measured, with the compute never timed alone: the smallest measured count's,
// scaled down in proportion (the sync those replicas would save is not known; the fit could put
// a step's whole fixed cost in it and predict thousands of times the measured throughput).
double predict_goodput(const GoodputModel& model, int replicas);

}  // namespace dlrun::runtime
