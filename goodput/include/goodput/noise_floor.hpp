#pragma once
// The noise floor: what a larger batch is worth beyond Pollux's goodput (docs/adaptive.md,
// "The noise floor"). Gradient noise holds a training loss above what its optimizer could
// reach, by about lr · tr(PΣ) / (4 · batch) (the stationary excess loss of preconditioned SGD
// on a quadratic: lr the rate per step, momentum folded in; Σ the per-sample gradient
// covariance; P the optimizer's preconditioner, 1 for SGD). A batch whose rate per sample is
// lower (the square-root rule's, AdaScale's) trains towards a lower floor: growing it works as
// a learning-rate decay does. Goodput counts how fast a batch makes progress, not where it
// settles; the choice below counts both, as the training loss that falls per second:
//   value(B) = fall · goodput(B) / goodput(now) + (floor(now) − floor(B)) / horizon(B)
// where `fall` is the loss's measured fall per second at the current batch (from LossTrend)
// and horizon(B) the seconds until the next decision at B. While the loss falls fast the
// first term rules, and the choice is Pollux's; as it levels off, what a lower floor gains
// decides, and a smaller batch (a higher floor) loses what the larger one gained. Pure logic,
// no I/O. Thread-safety: none needed (LossTrend: one training thread owns it).

#include <cstdint>
#include <functional>
#include <optional>
#include <vector>

#include "goodput/goodput.hpp"

namespace dlrun::runtime {

// lr · variance / (4 · batch): the excess loss that gradient noise holds steps of rate `lr`
// (momentum folded in: lr / (1 − momentum) for heavy-ball SGD) at, for a per-sample gradient
// variance `variance` (weighted by the preconditioner) and batch `batch`. 0 for inputs that
// are not positive and finite.
double noise_floor(double lr, double variance, double batch);

// The mean training loss of each interval between decisions, and how fast it falls.
class LossTrend {
 public:
  // One interval [start, end] (seconds) at global batch `batch`, whose steps had a mean loss
  // `mean_loss`. Ignored when not finite or when end ≤ start. Keeps the last few.
  void add(double start, double end, double mean_loss, int64_t batch);
  // The loss's fall per second (≥ 0: a rise counts as 0) between the last two intervals when
  // both were at `batch`; nullopt otherwise (the batch has just changed, or too few).
  std::optional<double> fall_rate(int64_t batch) const;
  size_t size() const { return m_intervals.size(); }
  void clear() { m_intervals.clear(); }

 private:
  struct Interval {
    double middle;
    double loss;
    int64_t batch;
  };
  std::vector<Interval> m_intervals;
};

// What the choice needs besides the goodput model.
struct FloorInputs {
  double fall_rate = 0;        // loss per second, at the current shape (≥ 0)
  double current_goodput = 0;  // the goodput model's, at the current shape (> 0)
  int64_t current_batch = 0;   // the current global batch
  double horizon_steps = 50;   // steps to the next decision (> 0)
  // The noise floor at a global batch (with the rate the scaling rule gives it there).
  std::function<double(double batch)> floor_at;
};

// value(B) above, in loss per second; the current shape's value is fall_rate.
double floor_value(const FloorInputs& in, const GoodputPoint& point);

// The shape with the highest floor_value among choose_batch's candidates (the same limits,
// bounds and micro-batch shapes), and its value. Throws std::invalid_argument as choose_batch
// does, and when current_goodput ≤ 0, horizon_steps ≤ 0 or floor_at is empty.
std::pair<GoodputPoint, double> choose_batch_with_floor(const ThroughputParams& params,
                                                        double noise_scale, int nodes, int replicas,
                                                        const BatchLimits& limits,
                                                        EfficiencyModel model,
                                                        const FloorInputs& in);

// True when the best candidate's `value` beats the current shape's (the fall rate) by
// min_improvement × (the fall + the current floor over one horizon at the current shape): a
// gain measured against both what the loss does and what the floor could give, so that floors
// that hardly differ between batches (AdaScale's where every gradient is noise: the rate per
// sample is the same at every batch) never move the batch on rounding.
bool should_switch_with_floor(const FloorInputs& in, const GoodputPoint& current, double value,
                              double min_improvement);

}  // namespace dlrun::runtime
