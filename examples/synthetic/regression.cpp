#include "regression.hpp"

#include <ATen/CPUGeneratorImpl.h>
#include <ATen/ops/randn.h>

namespace synthetic {

Regression make_regression(int64_t samples, int64_t dim, double noise, uint64_t seed) {
  at::Generator generator = at::detail::createCPUGenerator(seed);
  const auto options = at::TensorOptions().dtype(at::kFloat);
  at::Tensor w = at::randn({dim, 1}, generator, options);
  at::Tensor x = at::randn({samples, dim}, generator, options);
  at::Tensor epsilon = at::randn({samples, 1}, generator, options);
  return {x, x.matmul(w).add(epsilon.mul(noise))};
}

}  // namespace synthetic
