#pragma once
// A cheap end-of-training check that DataParallel did its work: every rank must hold the same
// weights. Collective (an allreduce of one number per rank).

#include <torch/nn/module.h>

#include "dlrun/context.hpp"

namespace examples {

// Throws std::runtime_error naming this rank when its weights differ from the ranks' mean.
void check_replicas_agree(const torch::nn::Module& net, dlrun::Context& ctx);

}  // namespace examples
