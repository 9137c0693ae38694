#pragma once
// OptimizerAdapter: what AdaptiveBatch needs of an optimizer — its parameter groups, their
// learning rates, its step, and for Adam-like optimizers the second moments that scale the
// gradient noise scale's norms. AdaptiveBatch wraps a LibTorch optimizer in one itself
// (adapt_optimizer); the Python module implements it over a torch.optim optimizer.
// Thread-safety: the training thread's.

#include <ATen/core/Tensor.h>

#include <cstdint>
#include <memory>
#include <vector>

namespace torch::optim {
class Optimizer;
}

namespace dlrun {

// Which learning-rate rule ScalingRule::automatic resolves to, and whether moments exist.
enum class OptimizerKind {
  sgd_like,  // AdaScale
  adam,      // Adam, AdamW: the adam rule (√scale), and the norms scaled by √v̂ + ε
  adaptive,  // another adaptive optimizer (RMSprop, Adagrad; in Python also Adamax, NAdam, RAdam):
             // the adam rule (√scale), raw norms
};

// One parameter's Adam state, as the noise scale's preconditioner reads it.
struct AdamMoments {
  at::Tensor param;
  at::Tensor exp_avg_sq;  // v
  int64_t step = 0;       // the optimizer steps v has taken in
  double beta2 = 0.999;
  double eps = 1e-8;
};

class OptimizerAdapter {
 public:
  virtual ~OptimizerAdapter() = default;
  virtual OptimizerKind kind() const = 0;
  virtual std::vector<std::vector<at::Tensor>> parameter_groups() const = 0;
  virtual std::vector<double> learning_rates() const = 0;
  virtual void set_learning_rates(const std::vector<double>& rates) = 0;
  virtual void step() = 0;
  // Adam's moments of the parameters that have them (none before the first step, or for
  // another kind).
  virtual std::vector<AdamMoments> adam_moments() const = 0;
  // How far a gradient moves the parameters in the long run, in multiples of the learning
  // rate: (1 − dampening) / (1 − momentum) for heavy-ball SGD, 1 for an optimizer whose
  // momentum is an average (Adam) or that has none. The noise floor's rate is lr × this.
  virtual double momentum_gain() const { return 1.0; }
};

// A LibTorch optimizer (not owned: it must outlive the adapter).
std::shared_ptr<OptimizerAdapter> adapt_optimizer(torch::optim::Optimizer& optimizer);

}  // namespace dlrun
