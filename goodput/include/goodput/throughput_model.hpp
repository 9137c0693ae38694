#pragma once
// ThroughputModel: predicts the time of one optimizer step from where and how it runs, and is
// fitted to the step times measured during training (as Pollux/AdaptDL's performance model):
//   t_grad(m)    = alpha_c + beta_c · m                     forward+backward of a micro-batch m
//   t_sync(n, r) = 0 for r = 1; alpha_n + beta_n · (r − 2)⁺ on one node (n = 1);
//                  alpha_r + beta_r · (r − 2)⁺ across nodes (n > 1)
//   t_optim      = (t_grad^gamma + t_sync^gamma)^(1/gamma)  the synced micro-step: the
//                  allreduce overlaps backward; gamma = 1 no overlap, large gamma full overlap
//   t_step       = (accum − 1) · t_grad + t_optim           accum micro-batches per step
// The fit minimises the squared error of log times over a profile of measured (nodes,
// replicas, micro-batch) configurations, with NLopt's bounded BOBYQA (docs/adaptive.md says
// why). Parameters that the profile cannot determine are pinned to priors: with one
// micro-batch size the compute time is taken as 90% proportional to the micro-batch; without
// multi-replica samples there is no sync cost, without multi-node samples the cross-node
// costs equal the on-node ones (and are never fitted below them); with one replica count a
// tier's beta takes its lowest allowed value (0 on one node, beta_n across nodes).
// Pure logic, no I/O, no LibTorch. Thread-safety: none.

#include <cstdint>
#include <map>
#include <string>
#include <tuple>
#include <vector>

namespace dlrun::runtime {

struct ThroughputParams {
  double alpha_c = 0, beta_c = 0;  // seconds, seconds per sample
  double alpha_n = 0, beta_n = 0;  // seconds, seconds per extra replica (one node)
  double alpha_r = 0, beta_r = 0;  // the same across nodes
  double gamma = 1;                // overlap exponent, in [1, 10]
};

struct StepShape {
  int nodes = 1;
  int replicas = 1;
  int64_t micro_batch = 1;  // samples per rank per micro-step
  int accum_steps = 1;      // micro-steps per optimizer step (1: no accumulation)
  int64_t global_batch() const { return int64_t{replicas} * micro_batch * accum_steps; }
};

double predict_grad_time(const ThroughputParams& p, int64_t micro_batch);
double predict_sync_time(const ThroughputParams& p, int nodes, int replicas);
double predict_optim_time(const ThroughputParams& p, const StepShape& shape);
double predict_step_time(const ThroughputParams& p, const StepShape& shape);
// Samples per second: shape.global_batch() / predict_step_time.
double predict_throughput(const ThroughputParams& p, const StepShape& shape);

// Measured times, aggregated per (nodes, replicas, micro_batch).
struct ProfileEntry {
  double accum_time_sum = 0;  // no-sync micro-steps (forward+backward only)
  int64_t accum_count = 0;
  double optim_time_sum = 0;  // synced micro-steps (forward+backward+allreduce+optimizer)
  int64_t optim_count = 0;
};
using ProfileKey = std::tuple<int, int, int64_t>;  // nodes, replicas, micro_batch

class ThroughputProfile {
 public:
  // Times that are not finite and positive cannot be measurements and are ignored.
  void add_accum(int nodes, int replicas, int64_t micro_batch, double seconds);
  void add_optim(int nodes, int replicas, int64_t micro_batch, double seconds);
  const std::map<ProfileKey, ProfileEntry>& entries() const { return m_entries; }
  bool empty() const { return m_entries.empty(); }
  // "key value" lines (and back), for checkpoints; parse throws std::invalid_argument.
  std::string serialize() const;
  void deserialize(const std::string& text);

 private:
  std::map<ProfileKey, ProfileEntry> m_entries;
};

// Fits the parameters to the profile (which must have at least one optim sample; throws
// std::invalid_argument otherwise). Deterministic for a given profile.
ThroughputParams fit_throughput(const ThroughputProfile& profile);

}  // namespace dlrun::runtime
