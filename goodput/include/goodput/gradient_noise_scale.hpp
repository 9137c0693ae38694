#pragma once
// GradientNoiseScale: estimates, per parameter group, the squared norm of the true gradient
// |G|² ("sqr") and the trace of the per-sample gradient covariance tr(Σ) ("var"), from two
// numbers measured every optimizer step (docs/adaptive.md derives them):
//   local_sqr: the mean over `count` local gradients of their squared norms, each local
//              gradient being the mean over `local_batch` samples (one rank's gradient before
//              averaging, with its accumulation steps folded in);
//   total_sqr: the squared norm of the average of those `count` gradients (the gradient the
//              optimizer sees, over count × local_batch samples).
// With b = local_batch and B = count × b, E[local_sqr] = |G|² + tr(Σ)/b and
// E[total_sqr] = |G|² + tr(Σ)/B, so
//   var = (local_sqr − total_sqr) / (1/b − 1/B),   sqr = total_sqr − var / B
// are unbiased. A single replica uses count = 2 over its last two steps (the caller averages
// them). Each group's estimates are smoothed with an exponential moving average whose
// weight per step depends on the samples it saw (theta = smoothing^(B / base_batch)), and
// bias-corrected as Adam's moments are, so the first steps are not pulled towards zero.
// Pure logic, no I/O, no LibTorch. Thread-safety: none (rank 0's training thread owns it).

#include <cstdint>
#include <string>
#include <vector>

namespace dlrun::runtime {

struct NoiseScaleState {
  std::vector<double> sqr_biased;  // moving averages before bias correction, per group
  std::vector<double> var_biased;
  double weight = 0;  // 1 − Π theta: the bias correction's divisor (0: nothing seen yet)
  int64_t observations = 0;
};

// The noise scale's ceiling: a mean gradient that its noise swamps (|G|² estimated at or below
// zero) reads as this, shown as "unbounded".
inline constexpr double k_unbounded_noise_scale = 1e12;

class GradientNoiseScale {
 public:
  // groups ≥ 1; base_batch > 0: the batch size at which var is normalised in gain();
  // smoothing in (0, 1): the moving average's weight per base_batch samples.
  GradientNoiseScale(size_t groups, double base_batch, double smoothing = 0.999);

  // One step's measurement; local_sqr and total_sqr have one entry per group; count ≥ 2,
  // local_batch ≥ 1. Non-finite inputs are ignored (returns false) so one overflowed step
  // cannot poison the averages. `steps` ≥ 1: how many steps the measurement stands for when
  // only every few steps are measured; the averages forget as much as over that many
  // measured steps, so they span the same samples whatever the cadence.
  bool observe(const std::vector<double>& local_sqr, const std::vector<double>& total_sqr,
               double local_batch, int count, double steps = 1);

  bool ready() const { return m_state.weight > 0; }
  size_t groups() const { return m_state.sqr_biased.size(); }
  // Bias-corrected estimates; 0 before the first observation. var is per sample (tr(Σ)).
  double sqr(size_t group) const;
  double var(size_t group) const;
  double sqr() const;  // summed over groups
  double var() const;
  // The critical batch size B_noise = var / sqr (samples): 0 before the first observation,
  // and clamped to [0, k_unbounded_noise_scale] (the gradient's mean lost in its noise: sqr ≤ 0).
  double noise_scale() const;
  // AdaScale's gain ratio for a batch `scale` times base_batch, over all groups:
  // (var/base + sqr) / (var/(base·scale) + sqr), in [1, scale]; 1 before any observation.
  double gain(double scale) const;

  NoiseScaleState state() const { return m_state; }
  // Throws std::invalid_argument when the state has another number of groups.
  void restore(const NoiseScaleState& state);
  // "key value" lines (and back), for checkpoints; parse throws std::invalid_argument.
  std::string serialize() const;
  void deserialize(const std::string& text);

 private:
  NoiseScaleState m_state;
  double m_base_batch;
  double m_smoothing;
};

}  // namespace dlrun::runtime
