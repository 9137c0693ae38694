#pragma once
// The small real problem behind the synthetic workload's gradients: linear regression
// y = x·w* + noise·ε, with x ~ N(0, 1) in `dim` features, w* ~ N(0, 1) and ε ~ N(0, 1), all
// drawn from one generator seeded with `seed`, so every rank (and every restart) builds the
// same data set without reading or sending anything. The noise level sets how noisy the
// per-sample gradients stay near the optimum, hence the gradient noise scale AdaptiveBatch
// measures: about noise² · dim / |w − w*|², growing as training converges.
//
// `condition` (at least 1) scales feature j by condition^(−j / (2 (dim − 1))), so the loss's
// curvature along the features spans 2 down to 2 / condition: the largest stable learning rate
// stays the same, and the flattest directions need about `condition` times as many steps (an
// ill-conditioned problem, as real models are, where training takes thousands of steps).

#include <ATen/core/Tensor.h>

#include <cstdint>

namespace synthetic {

struct Regression {
  at::Tensor x;  // [samples, dim]
  at::Tensor y;  // [samples, 1]
  int64_t size() const { return x.size(0); }
};

Regression make_regression(int64_t samples, int64_t dim, double noise, uint64_t seed,
                           double condition = 1.0);

}  // namespace synthetic
