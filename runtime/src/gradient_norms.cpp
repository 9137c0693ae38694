#include "gradient_norms.hpp"

#include <ATen/ATen.h>
#include <torch/optim/adam.h>
#include <torch/optim/adamw.h>

#include <cmath>
#include <sstream>
#include <type_traits>

namespace dlrun::runtime {
namespace {

at::Tensor sqr_norm(const at::Tensor& t) {
  const at::Tensor flat = t.reshape({-1}).to(at::kFloat);
  return at::dot(flat, flat);
}

// Stacks 0-d tensors and brings them to the host at once (one device sync, not one per group).
std::vector<double> to_host(const std::vector<at::Tensor>& scalars) {
  if (scalars.empty()) return {};
  const at::Tensor all = at::stack(scalars).to(at::kCPU, at::kDouble);
  const double* v = all.data_ptr<double>();
  return std::vector<double>(v, v + all.numel());
}

constexpr double k_denominator_floor = 0.1;

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
bool adam_inverse(torch::optim::Optimizer& optimizer, Preconditioner& out) {
  for (auto& group : optimizer.param_groups()) {
    const auto* options = dynamic_cast<const Options*>(&group.options());
    if (!options) return false;
    const double beta2 = std::get<1>(options->betas());
    for (const auto& p : group.params()) {
      auto found = optimizer.state().find(
          state_key<std::decay_t<decltype(optimizer.state())>>(p));
      if (found == optimizer.state().end()) continue;
      const auto* state = dynamic_cast<const State*>(found->second.get());
      if (!state || state->step() < 1) continue;
      const double correction = 1 - std::pow(beta2, static_cast<double>(state->step()));
      // Elements whose gradient was ~0 so far (dead units) have √v̂ ≈ 0: g / ε would swamp the
      // norms. Adam itself bounds their step (v takes in g first); here their denominator is
      // floored at a tenth of the tensor's mean one.
      at::Tensor denom = (state->exp_avg_sq() / correction).sqrt_();
      denom = at::maximum(denom, denom.mean().mul_(k_denominator_floor));
      out.inverse[p.unsafeGetTensorImpl()] = at::reciprocal(denom.add_(options->eps()));
    }
  }
  return !out.inverse.empty();
}

}  // namespace

at::Tensor Preconditioner::apply(const at::Tensor& param, const at::Tensor& grad) const {
  auto found = inverse.find(param.unsafeGetTensorImpl());
  return found == inverse.end() ? grad : grad * found->second.view_as(grad);
}

bool Preconditioner::update_from_adam(torch::optim::Optimizer& optimizer) {
  inverse.clear();
  if (dynamic_cast<torch::optim::Adam*>(&optimizer)) {
    return adam_inverse<torch::optim::AdamParamState, torch::optim::AdamOptions>(optimizer, *this);
  }
  if (dynamic_cast<torch::optim::AdamW*>(&optimizer)) {
    return adam_inverse<torch::optim::AdamWParamState, torch::optim::AdamWOptions>(optimizer,
                                                                                   *this);
  }
  return false;
}

std::vector<double> grad_sqr_norms(const ParamGroups& groups,
                                   const Preconditioner* preconditioner) {
  std::vector<at::Tensor> sums;
  for (const auto& group : groups) {
    at::Tensor sum = at::zeros({}, at::kFloat);
    for (const auto& p : group) {
      const at::Tensor& raw = p.grad();
      if (!raw.defined()) continue;
      const at::Tensor g = preconditioner ? preconditioner->apply(p, raw) : raw;
      sum = sum.to(g.device()) + sqr_norm(g);
    }
    sums.push_back(sum);
  }
  return to_host(sums);
}

bool PreviousGradients::measure(const ParamGroups& groups, const Preconditioner* preconditioner,
                                std::vector<double>& local_sqr, std::vector<double>& total_sqr) {
  const bool comparable = m_kept.size() == groups.size();
  std::vector<at::Tensor> scalars;  // per group: |prev|², |g|², |prev + g|²
  std::vector<std::vector<at::Tensor>> kept(groups.size());
  for (size_t i = 0; i < groups.size(); ++i) {
    at::Tensor prev_sqr = at::zeros({}, at::kFloat), g_sqr = prev_sqr, sum_sqr = prev_sqr;
    for (size_t j = 0; j < groups[i].size(); ++j) {
      const at::Tensor& raw = groups[i][j].grad();
      const at::Tensor g =
          raw.defined() && preconditioner ? preconditioner->apply(groups[i][j], raw) : raw;
      kept[i].push_back(g.defined() ? g.detach().clone() : at::Tensor());
      if (!comparable || !g.defined() || j >= m_kept[i].size() || !m_kept[i][j].defined()) continue;
      const at::Tensor& prev = m_kept[i][j];
      prev_sqr = prev_sqr.to(g.device()) + sqr_norm(prev);
      g_sqr = g_sqr.to(g.device()) + sqr_norm(g);
      sum_sqr = sum_sqr.to(g.device()) + sqr_norm(prev + g);
    }
    scalars.insert(scalars.end(), {prev_sqr, g_sqr, sum_sqr});
  }
  m_kept = std::move(kept);
  if (!comparable) return false;
  const std::vector<double> v = to_host(scalars);
  local_sqr.assign(groups.size(), 0.0);
  total_sqr.assign(groups.size(), 0.0);
  for (size_t i = 0; i < groups.size(); ++i) {
    local_sqr[i] = (v[3 * i] + v[3 * i + 1]) / 2;
    total_sqr[i] = v[3 * i + 2] / 4;
  }
  return true;
}

}  // namespace dlrun::runtime
