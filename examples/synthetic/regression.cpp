#include "regression.hpp"

#include <ATen/CPUGeneratorImpl.h>
#include <ATen/ops/arange.h>
#include <ATen/ops/pow.h>
#include <ATen/ops/randn.h>

namespace synthetic {

Regression make_regression(int64_t samples, int64_t dim, double noise, uint64_t seed,
                           double condition) {
  at::Generator generator = at::detail::createCPUGenerator(seed);
  const auto options = at::TensorOptions().dtype(at::kFloat);
  at::Tensor w = at::randn({dim, 1}, generator, options);
  at::Tensor x = at::randn({samples, dim}, generator, options);
  at::Tensor epsilon = at::randn({samples, 1}, generator, options);
  at::Tensor y = x.matmul(w).add(epsilon.mul(noise));
  if (condition > 1.0 && dim > 1) {
    // The model sees feature j scaled by condition^(-j / (2 (dim - 1))), its curvature scaled
    // by condition^(-j / (dim - 1)); the targets are the unscaled features', so every direction
    // starts with the same share of the loss, and the flattest need the largest weights.
    const at::Tensor exponent = at::arange(dim, options).div(-2.0 * static_cast<double>(dim - 1));
    x = x.mul(at::pow(condition, exponent));
  }
  return {x, y};
}

}  // namespace synthetic
