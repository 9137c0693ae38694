#pragma once
// Squared gradient norms per parameter group, the raw input of the gradient noise scale
// (goodput/gradient_noise_scale.hpp), and the single-replica fallback that measures it from
// two consecutive steps. Internal; LibTorch. Thread-safety: one training thread.

#include <ATen/core/Tensor.h>

#include <vector>

namespace dlrun::runtime {

using ParamGroups = std::vector<std::vector<at::Tensor>>;

// |∇|² of each group's gradients (parameters without a gradient count 0); one host copy.
std::vector<double> grad_sqr_norms(const ParamGroups& groups);

// A world of one has no second replica to compare its gradient with: the previous step's
// gradient stands in (count = 2 local gradients over the same batch size).
class PreviousGradients {
 public:
  // False on the first call after reset() (nothing to compare yet). Otherwise, per group:
  // local_sqr = (|g_prev|² + |g|²) / 2 and total_sqr = |(g_prev + g) / 2|². Keeps g either way.
  bool measure(const ParamGroups& groups, std::vector<double>& local_sqr,
               std::vector<double>& total_sqr);
  // Forget the kept gradient (the batch size changed: the two would not be comparable).
  void reset() { m_kept.clear(); }

 private:
  std::vector<std::vector<at::Tensor>> m_kept;
};

}  // namespace dlrun::runtime
