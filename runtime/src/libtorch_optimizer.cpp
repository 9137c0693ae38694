// OptimizerAdapter over a LibTorch optimizer (torch::optim): what AdaptiveBatch reads and
// sets of it.

#include <torch/optim/adagrad.h>
#include <torch/optim/adam.h>
#include <torch/optim/adamw.h>
#include <torch/optim/optimizer.h>
#include <torch/optim/rmsprop.h>
#include <torch/optim/sgd.h>

#include <sstream>
#include <type_traits>

#include "dlrun/optimizer_adapter.hpp"

namespace dlrun {
namespace {

// The optimizer's state key of a parameter: LibTorch 1.x keys by the printed TensorImpl
// address, 2.x by the address itself.
template <typename StateMap>
typename StateMap::key_type state_key(const at::Tensor& p) {
  using Key = typename StateMap::key_type;
  if constexpr (std::is_same_v<Key, std::string>) {
    std::ostringstream out;
    out << p.unsafeGetTensorImpl();
    return out.str();
  } else {
    return static_cast<Key>(p.unsafeGetTensorImpl());
  }
}

template <typename State, typename Options>
std::vector<AdamMoments> moments(torch::optim::Optimizer& optimizer) {
  std::vector<AdamMoments> out;
  for (auto& group : optimizer.param_groups()) {
    const auto* options = dynamic_cast<const Options*>(&group.options());
    if (!options) return {};
    for (const auto& p : group.params()) {
      auto found = optimizer.state().find(state_key<std::decay_t<decltype(optimizer.state())>>(p));
      if (found == optimizer.state().end()) continue;
      const auto* state = dynamic_cast<const State*>(found->second.get());
      if (!state) continue;
      out.push_back(
          {p, state->exp_avg_sq(), state->step(), std::get<1>(options->betas()), options->eps()});
    }
  }
  return out;
}

class LibTorchOptimizer : public OptimizerAdapter {
 public:
  explicit LibTorchOptimizer(torch::optim::Optimizer& optimizer) : m_optimizer(optimizer) {}

  OptimizerKind kind() const override {
    if (dynamic_cast<torch::optim::Adam*>(&m_optimizer) ||
        dynamic_cast<torch::optim::AdamW*>(&m_optimizer)) {
      return OptimizerKind::adam;
    }
    if (dynamic_cast<torch::optim::RMSprop*>(&m_optimizer) ||
        dynamic_cast<torch::optim::Adagrad*>(&m_optimizer)) {
      return OptimizerKind::adaptive;
    }
    return OptimizerKind::sgd_like;
  }
  std::vector<std::vector<at::Tensor>> parameter_groups() const override {
    std::vector<std::vector<at::Tensor>> out;
    for (auto& group : m_optimizer.param_groups()) out.push_back(group.params());
    return out;
  }
  std::vector<double> learning_rates() const override {
    std::vector<double> out;
    for (auto& group : m_optimizer.param_groups()) out.push_back(group.options().get_lr());
    return out;
  }
  void set_learning_rates(const std::vector<double>& rates) override {
    auto& groups = m_optimizer.param_groups();
    for (size_t g = 0; g < groups.size() && g < rates.size(); ++g)
      groups[g].options().set_lr(rates[g]);
  }
  void step() override { m_optimizer.step(); }
  std::vector<AdamMoments> adam_moments() const override {
    if (dynamic_cast<torch::optim::Adam*>(&m_optimizer)) {
      return moments<torch::optim::AdamParamState, torch::optim::AdamOptions>(m_optimizer);
    }
    if (dynamic_cast<torch::optim::AdamW*>(&m_optimizer)) {
      return moments<torch::optim::AdamWParamState, torch::optim::AdamWOptions>(m_optimizer);
    }
    return {};
  }
  double momentum_gain() const override {
    if (!dynamic_cast<torch::optim::SGD*>(&m_optimizer) || m_optimizer.param_groups().empty()) {
      return 1.0;
    }
    const auto* options =
        dynamic_cast<const torch::optim::SGDOptions*>(&m_optimizer.param_groups()[0].options());
    if (!options || !(options->momentum() > 0 && options->momentum() < 1)) return 1.0;
    return (1 - options->dampening()) / (1 - options->momentum());
  }

 private:
  torch::optim::Optimizer& m_optimizer;
};

}  // namespace

std::shared_ptr<OptimizerAdapter> adapt_optimizer(torch::optim::Optimizer& optimizer) {
  return std::make_shared<LibTorchOptimizer>(optimizer);
}

}  // namespace dlrun
