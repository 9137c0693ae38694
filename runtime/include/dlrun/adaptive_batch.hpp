#pragma once
// AdaptiveBatch: chooses the global batch size, the per-rank micro-batch and the number of
// gradient-accumulation steps that train fastest, while training (goodput, as AdaptDL/Pollux),
// and scales the learning rate to match (AdaScale by default). docs/adaptive.md explains the
// method and every option.
//
// Every `measure_every` optimizer steps it measures the gradient noise scale (from the squared
// norms of each rank's local gradient and of the averaged gradient; DataParallel carries the
// local norms in the step's stop vote); every step, the time of the step's micro-steps. Every `replan_every` steps rank
// 0 fits the throughput model to the measured times, picks the shape with the highest
// predicted goodput = throughput × statistical efficiency within the limits, and all ranks
// switch to it at the same step (only when the predicted gain is worth it). With the training
// loss (backward() or observe_loss()) it also counts the noise floor each batch's rate per
// sample trains towards: the shape that sheds the most loss per second wins, so the batch keeps
// growing as the loss levels off (noise_floor; docs/adaptive.md, "The noise floor"). Rank 0
// appends a JSON line to $DLRUN_RUN_DIR/metrics.jsonl every `log_every` steps, and before each
// switch of batch (docs/adaptive.md, "metrics.jsonl").
// Track it in the Checkpoint (it is a Checkpointable): the noise scale, the measured profile,
// the current batch and the progress survive a restart, also with another number of ranks
// (the plan is then re-made for the new count).
//
//   dlrun::AdaptiveBatchOptions options;  options.initial_batch = 64;  options.max_batch = 4096;
//   dlrun::AdaptiveBatch adaptive(ctx, dp, optimizer, options);
//   ckpt.track("adaptive", adaptive);
//   while (auto batch = sampler.next(adaptive.global_batch())) {
//     auto parts = adaptive.split(batch->indices);           // this rank's micro-batches
//     for (size_t i = 0; i < parts.size(); ++i) {
//       auto loss = loss_sum(parts[i]) * batch->loss_scale(ctx.world_size());
//       adaptive.backward(loss, i + 1 == parts.size());      // sync on the last one only
//     }
//     adaptive.step(batch->global_size);  // noise scale, lr, optimizer.step(), re-plan, metrics
//     optimizer.zero_grad();
//   }
//
// Ownership: keeps the Context; the DataParallel and the optimizer are the caller's and must
// outlive it. Thread-safety: one training thread; step() is collective.

#include <chrono>
#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "dlrun/checkpoint.hpp"
#include "dlrun/context.hpp"
#include "dlrun/optimizer_adapter.hpp"
#include "dlrun/scaling_rule.hpp"

namespace at {
class Tensor;
}
namespace torch::optim {
class Optimizer;
}

namespace dlrun {

class DataParallel;

struct AdaptiveBatchOptions {
  // Global batch at the start; the optimizer's learning rates are the ones for this batch.
  int64_t initial_batch = 64;
  // Largest global batch to choose.
  int64_t max_batch = 4096;
  // Per-rank micro-batch limits (memory): max 0 means max_batch / ranks.
  int64_t min_micro_batch = 1;
  int64_t max_micro_batch = 0;
  // May run several micro-steps per optimizer step (when max_micro_batch is the limit).
  bool accumulation = true;
  ScalingRule rule = ScalingRule::automatic;
  // Re-decide every this many optimizer steps (the first time after this many, too). 0:
  // automatic, 25 where the ranks train on GPUs (a step costs about the same at any batch
  // there, and the batch should climb sooner) and 50 on CPUs (docs/adaptive.md, "Decisions").
  int64_t replan_every = 0;
  // Measure the gradient noise scale on every this many optimizer steps (1: every step). The
  // steps in between cost what a plain DataParallel step does; each measurement weighs as
  // much as the steps it stands for, so the estimate spans the same samples at any cadence.
  int64_t measure_every = 4;
  // Switch only when the predicted goodput gain is at least this fraction; with the noise
  // floor, when the predicted fall of the loss per second beats the measured one by this
  // fraction of (the fall + the current floor over one decision interval).
  double min_improvement = 0.05;
  // Also value a batch by the noise floor its rate per sample trains towards, from the
  // training loss (backward() or observe_loss()) and the gradient noise: as the loss levels
  // off, a larger batch (a lower floor) is worth more than its goodput says, and the batch
  // grows as a learning-rate decay would (docs/adaptive.md, "The noise floor"). false, or no
  // loss observed: goodput alone decides, as in Pollux.
  bool noise_floor = true;
  // The noise scale's moving average keeps this weight per initial batch of samples.
  double smoothing = 0.999;
  // Append to metrics.jsonl every this many steps, and before a switch of batch (0: never).
  // The file is $DLRUN_RUN_DIR/metrics.jsonl unless metrics_path is given.
  int64_t log_every = 10;
  std::string metrics_path;
  // Seconds on a monotonic clock, read to time steps and micro-steps. Empty: steady_clock.
  // Tests give step times of their choosing here, so that what is decided does not depend
  // on how fast or busy the machine is.
  std::function<double()> clock;
};

// The shape of the next optimizer step; the same on every rank.
struct BatchShape {
  int64_t global_batch = 0;
  int64_t micro_batch = 0;  // per rank, per micro-step
  int accum_steps = 1;      // micro-steps per optimizer step
};

// What the last step measured and decided (rank 0's view; every rank has the noise scale).
struct AdaptiveStats {
  int64_t step = 0;
  double progress = 0;     // scale-invariant steps: Σ step worth (the gain, or √(gain·scale))
  double gain = 1;         // AdaScale gain of the last step
  double lr_factor = 1;    // multiplier applied to the learning rates
  double noise_scale = 0;  // B_noise = tr(Σ)/|G|², samples; 0 until measured
  // noise_scale's ceiling: the mean gradient lost in its noise (|G|² estimated at or below 0).
  static constexpr double k_unbounded_noise_scale = 1e12;
  bool noise_unbounded() const { return noise_scale >= k_unbounded_noise_scale; }
  double grad_sqr = 0, grad_var = 0;
  double efficiency = 1;       // statistical efficiency of the current batch
  double samples_per_sec = 0;  // measured over the last logging interval
  double goodput = 0;          // samples_per_sec × efficiency
  int64_t measure_every = 1;   // the noise scale's cadence now (options.measure_every, stretched)
  // Rank 0's mean training loss over the steps since the last metrics line (or, with
  // log_every 0, the last decision); 0: none seen.
  double loss = 0;
  double noise_floor = 0;  // the loss noise holds the current batch and rate at (0: not known)
};

class AdaptiveBatch : public Checkpointable {
 public:
  AdaptiveBatch(Context context, DataParallel& data_parallel, torch::optim::Optimizer& optimizer,
                AdaptiveBatchOptions options = {});
  // Over any optimizer (the Python module's torch.optim ones): see optimizer_adapter.hpp.
  AdaptiveBatch(Context context, DataParallel& data_parallel, std::shared_ptr<OptimizerAdapter> optimizer,
                AdaptiveBatchOptions options = {});
  ~AdaptiveBatch() override;
  AdaptiveBatch(const AdaptiveBatch&) = delete;
  AdaptiveBatch& operator=(const AdaptiveBatch&) = delete;

  BatchShape shape() const;
  int64_t global_batch() const { return shape().global_batch; }
  // Splits this rank's share of the step into accum_steps micro-batches (in order; the last
  // ones may be short or empty at the end of an epoch). Call it once per step, before the
  // step's first micro-batch, and train every part it returns: in a world of one with one
  // micro-batch a step, a step that measures the gradient noise scale comes as two halves
  // (two parts of half the size; docs/adaptive.md, "A world of one").
  std::vector<std::vector<int64_t>> split(const std::vector<int64_t>& indices) const;

  // loss.backward() of one micro-batch; last = true for the step's last micro-batch (the one
  // whose gradients are reduced over the ranks), false for the accumulated ones before it.
  // Also observe_loss(loss).
  void backward(const at::Tensor& loss, bool last);
  // The loss of one of this step's micro-batches, for a caller that runs the backward passes
  // itself: the step's loss is the sum of those observed (as the losses passed to backward()
  // sum to the step's mean loss, scaled by SampleBatch::loss_scale). Read back once per
  // decision, not per step (no device sync). Without it the noise floor is not counted.
  void observe_loss(const at::Tensor& loss);
  // For a caller that runs the backward passes itself (under DataParallel::no_sync() for all
  // but the last): call it after each accumulated micro-batch's backward, so that its time
  // enters the throughput model as backward(loss, false) would enter it.
  void accumulated();
  // After the last backward(): measures, scales the learning rates, optimizer.step() (through
  // DataParallel, so stop requests work as usual), and every replan_every steps agrees on the
  // next shape. Collective. `samples`: the step's global sample count when it is not
  // global_batch() (an epoch's short last batch: SampleBatch::global_size).
  void step(int64_t samples = -1);

  // Scale-invariant progress (Σ each step's worth in initial-batch steps: the gain, or
  // √(gain · scale) for an adaptive optimizer at √scale rates, scaling_rule.hpp): use it for
  // learning-rate schedules and "epochs".
  double progress() const;
  const AdaptiveStats& stats() const;
  // The learning rates the user sets for the initial batch (e.g. from a schedule on
  // progress()); each step applies them × lr_factor. Default: the optimizer's at construction.
  void set_base_lr(double lr);  // every parameter group's
  // One per parameter group, as the optimizer had them at construction; set_base_lrs throws
  // ConfigError for another count.
  std::vector<double> base_lrs() const;
  void set_base_lrs(const std::vector<double>& lrs);

  std::string checkpoint_state() const override;
  void restore_checkpoint_state(const std::string& text) override;

 private:
  struct Impl;
  std::unique_ptr<Impl> m_impl;
};

}  // namespace dlrun
