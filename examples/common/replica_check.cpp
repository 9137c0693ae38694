#include "replica_check.hpp"

#include <fmt/format.h>

#include <cmath>
#include <stdexcept>
#include <vector>

namespace examples {

void check_replicas_agree(const torch::nn::Module& net, dlrun::Context& ctx) {
  double sum = 0;
  for (const auto& p : net.parameters()) sum += p.detach().abs().sum().item<double>();
  std::vector<double> sums{sum};
  ctx.all_reduce_sum(sums);
  const double mean = sums[0] / ctx.world_size();
  if (std::abs(sum - mean) > 1e-6 * std::abs(mean)) {
    throw std::runtime_error(
        fmt::format("rank {}: weights differ from the other ranks' (|w| sum {} vs mean {})",
                    ctx.rank(), sum, mean));
  }
}

}  // namespace examples
