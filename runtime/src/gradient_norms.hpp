#pragma once
// Squared gradient norms per parameter group, the raw input of the gradient noise scale
// (goodput/gradient_noise_scale.hpp), and the single-replica fallback that measures it from
// two consecutive steps. Internal; LibTorch. Thread-safety: one training thread.

#include <ATen/core/Tensor.h>

#include <memory>
#include <unordered_map>
#include <vector>

#include "dlrun/optimizer_adapter.hpp"

namespace dlrun::runtime {

using ParamGroups = std::vector<std::vector<at::Tensor>>;

// For adaptive optimizers the noise scale is measured on the gradient as the optimizer will
// use it: each element divided by Adam's denominator √(v̂) + ε (as AdaptDL does), floored at a
// tenth of its tensor's mean denominator. inverse maps a parameter to 1 / denominator; a
// parameter without an entry is taken as is.
struct Preconditioner {
  std::unordered_map<const c10::TensorImpl*, at::Tensor> inverse;
  at::Tensor apply(const at::Tensor& param, const at::Tensor& grad) const;
  // |apply(param, grad)|² as a 0-d float tensor on grad's device, without the preconditioned
  // copy on the CPU (a measured step must not push the model out of the caches).
  at::Tensor sqr_norm(const at::Tensor& param, const at::Tensor& grad) const;
  // Recomputes inverse from Adam's moments (OptimizerAdapter::adam_moments, after its step),
  // into the tensors of the last refresh where the shapes still match (no allocation).
  // False, and inverse left empty, when there are none (another optimizer, or no step yet).
  bool update(const std::vector<AdamMoments>& moments);
};

// |t|² as a 0-d float tensor on t's device.
at::Tensor sqr_norm(const at::Tensor& t);

// 0-d tensors stacked and brought to the host at once, as doubles (one device sync, not one
// per tensor).
std::vector<double> to_host(const std::vector<at::Tensor>& scalars);

// |∇|² of each group's gradients (parameters without a gradient count 0); one host copy.
std::vector<double> grad_sqr_norms(const ParamGroups& groups,
                                   const Preconditioner* preconditioner = nullptr);

// A world of one has no second replica to compare its gradient with. HalfGradients (below)
// compares the two halves of one step's batch; where a step cannot be split (no accumulation,
// a batch of one, a training loop that does not train AdaptiveBatch::split's micro-batches) the
// previous step's gradient stands in (count = 2 local gradients over the same batch size).
// That fallback is biased: the weights move between the two steps, and the change of the
// gradient counts as noise, b/2 · |∇(w₁) − ∇(w₂)|² more variance, which grows with the batch.
class PreviousGradients {
 public:
  // False on the first call after reset() (nothing to compare yet). Otherwise, per group:
  // local_sqr = (|g_prev|² + |g|²) / 2 and total_sqr = |(g_prev + g) / 2|². Keeps g either way.
  bool measure(const ParamGroups& groups, const Preconditioner* preconditioner,
               std::vector<double>& local_sqr, std::vector<double>& total_sqr);
  // Forget the kept gradient (the batch size changed: the two would not be comparable).
  void reset() { m_kept.clear(); }

 private:
  std::vector<std::vector<at::Tensor>> m_kept;
};

// The noise scale of a world of one from the two halves of one step's batch, at the same
// weights (unbiased, unlike PreviousGradients): the step trains its batch as two halves of
// micro-batches; keep() takes the gradient accumulated after the first half, measure() the
// step's whole one. The loss is the samples' sum × 1 / batch (SampleBatch::loss_scale), so the
// kept gradient is first/(first+second) of the first half's mean gradient.
class HalfGradients {
 public:
  void keep(const ParamGroups& groups);
  bool kept() const { return !m_kept.empty(); }
  // Per group: local_sqr = (|g₁|² + |g₂|²) / 2 of the halves' mean gradients, total_sqr = |g|²
  // of the step's; batch = the halves' harmonic mean size, 2·first·second / (first + second)
  // (what (|g₁|² + |g₂|²) / 2 carries of the variance). False without a kept half.
  bool measure(const ParamGroups& groups, const Preconditioner* preconditioner, int64_t first,
               int64_t second, std::vector<double>& local_sqr, std::vector<double>& total_sqr,
               double& batch);
  void reset() { m_kept.clear(); }

 private:
  std::vector<std::vector<at::Tensor>> m_kept;
};

}  // namespace dlrun::runtime
