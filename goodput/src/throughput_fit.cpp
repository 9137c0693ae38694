// fit_throughput (declared in throughput_model.hpp): the least-squares fit of the throughput
// model's parameters to a profile, in log-time space, with NLopt's bounded BOBYQA.
#include <nlopt.h>

#include <algorithm>
#include <array>
#include <cmath>
#include <set>
#include <stdexcept>
#include <vector>

#include "goodput/throughput_model.hpp"

namespace dlrun::runtime {

namespace {

// The optimiser's coordinates. Cross-node costs are the on-node ones plus a non-negative extra,
// so that the fit can never make crossing nodes cheaper than staying on one.
enum Slot : size_t {
  k_alpha_c,  // with a single micro-batch size: the whole compute time at that size
  k_beta_c,
  k_alpha_n,
  k_beta_n,
  k_alpha_extra,
  k_beta_extra,
  k_gamma,
  k_slots
};
using Point = std::array<double, k_slots>;

constexpr double k_single_micro_share = 0.9;  // prior: compute 90% proportional to the batch
constexpr double k_gamma_weight = 1e-6;       // tie-breaker towards gamma = 1 (no overlap)
constexpr int k_max_evaluations = 1500;

struct Sample {
  bool optim;  // a synced micro-step (else forward+backward only)
  int nodes, replicas;
  int64_t micro_batch;
  double seconds;
};

struct Problem {
  std::vector<Sample> samples;
  std::array<bool, k_slots> free{};
  Point lower{}, upper{}, scale{};
  int64_t single_micro = 0;  // > 0: the only micro-batch size seen
  std::vector<size_t> free_slots;
};

ThroughputParams to_params(const Problem& problem, const Point& x) {
  ThroughputParams p;
  if (problem.single_micro > 0) {
    p.alpha_c = (1 - k_single_micro_share) * x[k_alpha_c];
    p.beta_c = k_single_micro_share * x[k_alpha_c] / static_cast<double>(problem.single_micro);
  } else {
    p.alpha_c = x[k_alpha_c];
    p.beta_c = x[k_beta_c];
  }
  p.alpha_n = x[k_alpha_n];
  p.beta_n = x[k_beta_n];
  p.alpha_r = x[k_alpha_n] + x[k_alpha_extra];
  p.beta_r = x[k_beta_n] + x[k_beta_extra];
  p.gamma = x[k_gamma];
  return p;
}

double loss(const Problem& problem, const Point& x) {
  const ThroughputParams p = to_params(problem, x);
  double sum = 0;
  for (const Sample& s : problem.samples) {
    const double predicted =
        s.optim ? predict_optim_time(p, StepShape{s.nodes, s.replicas, s.micro_batch, 1})
                : predict_grad_time(p, s.micro_batch);
    const double error = std::log(std::max(predicted, 1e-30)) - std::log(s.seconds);
    sum += error * error;
  }
  const double gamma_excess = p.gamma - 1;
  return sum / static_cast<double>(problem.samples.size()) +
         k_gamma_weight * gamma_excess * gamma_excess;
}

struct Objective {
  const Problem* problem;
  Point base;  // pinned slots hold their values; free slots are overwritten
};

double objective(unsigned n, const double* u, double* /*grad*/, void* data) {
  auto* o = static_cast<Objective*>(data);
  Point x = o->base;
  for (unsigned i = 0; i < n; ++i) {
    const size_t slot = o->problem->free_slots[i];
    x[slot] = u[i] * o->problem->scale[slot];
  }
  return loss(*o->problem, x);
}

// Least-squares line y = a + b·x with a, b ≥ 0; b = 0 unless asked for and x varies.
std::array<double, 2> line_fit(const std::vector<std::array<double, 2>>& xy, bool slope) {
  if (xy.empty()) return {0, 0};
  double mx = 0, my = 0;
  for (const auto& [x, y] : xy) mx += x, my += y;
  mx /= xy.size(), my /= xy.size();
  double sxx = 0, sxy = 0;
  for (const auto& [x, y] : xy) sxx += (x - mx) * (x - mx), sxy += (x - mx) * (y - my);
  if (!slope || sxx <= 0) return {std::max(my, 0.0), 0};
  const double b = sxy / sxx, a = my - b * mx;
  if (b < 0) return {std::max(my, 0.0), 0};
  if (a < 0) return {0, mx > 0 ? std::max(my, 0.0) / mx : 0};
  return {a, b};
}

Problem make_problem(const ThroughputProfile& profile) {
  Problem problem;
  std::set<int64_t> micro_sizes;
  std::set<int> on_node, cross_node;  // replica counts with a sync cost
  bool any_optim = false;
  bool compute_alone = false;  // a time without sync: accumulation, or a single replica
  for (const auto& [key, entry] : profile.entries()) {
    const auto& [nodes, replicas, micro] = key;
    if (entry.accum_count > 0 && entry.accum_time_sum > 0) {
      problem.samples.push_back(
          {false, nodes, replicas, micro, entry.accum_time_sum / entry.accum_count});
      micro_sizes.insert(micro);
      compute_alone = true;
    }
    if (entry.optim_count > 0 && entry.optim_time_sum > 0) {
      problem.samples.push_back(
          {true, nodes, replicas, micro, entry.optim_time_sum / entry.optim_count});
      micro_sizes.insert(micro);
      any_optim = true;
      if (replicas >= 2) (nodes > 1 ? cross_node : on_node).insert(replicas);
      if (replicas == 1) compute_alone = true;
    }
  }
  if (!any_optim) {
    throw std::invalid_argument(
        "fit_throughput: the profile has no measured optimizer step (synced micro-step); "
        "record at least one with ThroughputProfile::add_optim before fitting");
  }
  const bool sync = !on_node.empty() || !cross_node.empty();
  auto& free = problem.free;
  free[k_alpha_c] = true;
  free[k_beta_c] = micro_sizes.size() >= 2;
  if (micro_sizes.size() == 1) problem.single_micro = *micro_sizes.begin();
  free[k_alpha_n] = sync;
  // The overlap needs the compute and the sync told apart: compute timed alone, or the same
  // compute under two sync costs (two replica counts). Synced steps at one replica count only
  // fit a slow compute hidden under a fixed sync (large gamma) as well as a fixed cost plus a
  // cheap compute (gamma = 1), and the first predicts that larger batches buy nothing: gamma
  // stays at its prior, 1, so that the job tries a larger batch and measures it.
  free[k_gamma] = sync && (compute_alone || on_node.size() + cross_node.size() >= 2);
  free[k_beta_n] = on_node.size() >= 2 || (on_node.empty() && cross_node.size() >= 2);
  free[k_alpha_extra] = !on_node.empty() && !cross_node.empty();
  free[k_beta_extra] = !on_node.empty() && cross_node.size() >= 2;

  double mean_time = 0, max_time = 0;
  int max_extra = 1;
  for (const Sample& s : problem.samples) {
    mean_time += s.seconds / problem.samples.size();
    max_time = std::max(max_time, s.seconds);
    max_extra = std::max(max_extra, s.replicas - 2);
  }
  const double m_min = static_cast<double>(*micro_sizes.begin());
  const double m_max = static_cast<double>(*micro_sizes.rbegin());
  problem.scale = {mean_time, mean_time / m_max,     mean_time, mean_time / max_extra,
                   mean_time, mean_time / max_extra, 1.0};
  // No term of the model can exceed the step it is part of: 10× the slowest is a safe roof.
  const double roof = 10 * max_time;
  problem.upper = {roof, roof / m_min, roof, roof, roof, roof, 10.0};
  problem.lower = {problem.single_micro > 0 ? 1e-6 * mean_time : 0, 0, 0, 0, 0, 0, 1.0};
  for (size_t slot = 0; slot < k_slots; ++slot) {
    if (free[slot]) problem.free_slots.push_back(slot);
  }
  return problem;
}

// A starting point from the data: compute from the forward+backward-only and single-replica
// times, then each tier's sync time by undoing the overlap for this gamma.
Point initial_guess(const Problem& problem, double gamma) {
  std::vector<std::array<double, 2>> compute, on_node, cross_node;
  for (const Sample& s : problem.samples) {
    if (!s.optim || s.replicas == 1) compute.push_back({double(s.micro_batch), s.seconds});
  }
  if (compute.empty()) {  // only multi-replica steps: guess half of each for compute
    for (const Sample& s : problem.samples)
      compute.push_back({double(s.micro_batch), s.seconds / 2});
  }
  Point x{};
  const auto [a_c, b_c] = line_fit(compute, problem.free[k_beta_c]);
  x[k_alpha_c] = a_c;
  x[k_beta_c] = b_c;
  x[k_gamma] = problem.free[k_gamma] ? gamma : 1.0;
  const ThroughputParams p = to_params(problem, x);
  for (const Sample& s : problem.samples) {
    if (!s.optim || s.replicas < 2) continue;
    const double grad = predict_grad_time(p, s.micro_batch);
    const double floor = std::pow(0.1 * s.seconds, gamma);
    const double excess = std::max(std::pow(s.seconds, gamma) - std::pow(grad, gamma), floor);
    const double extra = std::max(s.replicas - 2, 0);
    (s.nodes > 1 ? cross_node : on_node).push_back({extra, std::pow(excess, 1 / gamma)});
  }
  const auto& base_tier = on_node.empty() ? cross_node : on_node;
  const auto [a_n, b_n] = line_fit(base_tier, problem.free[k_beta_n]);
  x[k_alpha_n] = a_n;
  x[k_beta_n] = b_n;
  if (!on_node.empty() && problem.free[k_alpha_extra]) {
    for (auto& [extra, seconds] : cross_node) seconds -= a_n + b_n * extra;
    const auto [a_x, b_x] = line_fit(cross_node, problem.free[k_beta_extra]);
    x[k_alpha_extra] = a_x;
    x[k_beta_extra] = b_x;
  }
  for (size_t slot = 0; slot < k_slots; ++slot) {
    if (!problem.free[slot]) x[slot] = slot == k_gamma ? 1.0 : 0.0;
    x[slot] = std::clamp(x[slot], problem.lower[slot], problem.upper[slot]);
  }
  return x;
}

// Runs BOBYQA from `start` over the free slots; returns the best point seen.
Point minimise(const Problem& problem, const Point& start) {
  const auto n = static_cast<unsigned>(problem.free_slots.size());
  std::vector<double> u(n), lower(n), upper(n), step(n);
  for (unsigned i = 0; i < n; ++i) {
    const size_t slot = problem.free_slots[i];
    const double scale = problem.scale[slot];
    u[i] = start[slot] / scale;
    lower[i] = problem.lower[slot] / scale;
    upper[i] = problem.upper[slot] / scale;
    step[i] = std::min(0.25, (upper[i] - lower[i]) / 4);
  }
  Objective data{&problem, start};
  nlopt_opt opt = nlopt_create(NLOPT_LN_BOBYQA, n);
  if (opt == nullptr) return start;
  nlopt_set_lower_bounds(opt, lower.data());
  nlopt_set_upper_bounds(opt, upper.data());
  nlopt_set_initial_step(opt, step.data());
  nlopt_set_min_objective(opt, objective, &data);
  nlopt_set_xtol_rel(opt, 1e-6);
  nlopt_set_ftol_abs(opt, 1e-12);
  nlopt_set_maxeval(opt, k_max_evaluations);
  double value = 0;
  const nlopt_result result = nlopt_optimize(opt, u.data(), &value);
  nlopt_destroy(opt);
  // Failure codes other than round-off leave u unspecified: keep the start then.
  if (result < 0 && result != NLOPT_ROUNDOFF_LIMITED) return start;
  Point x = start;
  for (unsigned i = 0; i < n; ++i) {
    const size_t slot = problem.free_slots[i];
    x[slot] = std::clamp(u[i] * problem.scale[slot], problem.lower[slot], problem.upper[slot]);
  }
  return loss(problem, x) <= loss(problem, start) ? x : start;
}

}  // namespace

ThroughputParams fit_throughput(const ThroughputProfile& profile) {
  const Problem problem = make_problem(profile);
  // BOBYQA is local and gamma trades off against the sync costs: start from several overlaps.
  const std::vector<double> gammas =
      problem.free[k_gamma] ? std::vector<double>{1.0, 2.0, 4.0} : std::vector<double>{1.0};
  Point best = minimise(problem, initial_guess(problem, gammas.front()));
  double best_loss = loss(problem, best);
  for (size_t i = 1; i < gammas.size(); ++i) {
    const Point x = minimise(problem, initial_guess(problem, gammas[i]));
    const double value = loss(problem, x);
    if (value < best_loss) best_loss = value, best = x;
  }
  return to_params(problem, best);
}

}  // namespace dlrun::runtime
