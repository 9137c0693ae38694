#include "dlrun/launcher/goodput_policy.hpp"

#include <algorithm>
#include <cmath>
#include <numeric>
#include <stdexcept>

#include <fmt/format.h>

namespace dlrun::launcher {
namespace {


// The share of a GPU's worth that the neutral prediction gives each GPU beyond the fair share.
constexpr double k_unmeasured_slope = 0.1;

double goodput_at(const PolicyJob& job, int gpus, int share) {
  if (gpus <= 0) return 0;
  if (job.goodput.empty()) {
    // Neutral until measured: perfectly scalable up to the fair share; beyond it, a job that has
    // shown nothing is not given GPUs on faith that a measured job could use (a tenth of the
    // slope still takes GPUs nobody else wants).
    if (gpus <= share) return gpus;
    return share + k_unmeasured_slope * (gpus - share);
  }
  if (static_cast<size_t>(gpus) < job.goodput.size()) return std::max(0.0, job.goodput[gpus]);
  return std::max(0.0, job.goodput.back());
}

double box_cox(double x, double p) { return std::fabs(p) < 1e-12 ? std::log(x) : (std::pow(x, p) - 1) / p; }

}  // namespace

int fair_share(const PolicyJob& job, int capacity, int jobs) {
  int share = std::max(1, capacity / std::max(1, jobs));
  return std::clamp(share, job.min_gpus, std::max(job.min_gpus, job.max_gpus));
}

std::vector<int> allowed_gpus(const PolicyJob& job, bool must_start) {
  if (job.pinned) return {*job.pinned};
  if (job.current > 0 && !job.elastic) return {job.current};
  std::vector<int> out;
  if (job.current == 0 && !must_start) out.push_back(0);
  if (!job.elastic) {
    out.push_back(job.max_gpus);
    return out;
  }
  for (int g = job.min_gpus; g <= job.max_gpus; ++g) out.push_back(g);
  return out;
}

PolicyScore& PolicyScore::operator+=(const PolicyScore& o) {
  waiting += o.waiting;
  waiting_age += o.waiting_age;
  utility += o.utility;
  return *this;
}

bool better(const PolicyScore& a, const PolicyScore& b) {
  if (a.waiting != b.waiting) return a.waiting < b.waiting;
  if (a.waiting_age != b.waiting_age) return a.waiting_age < b.waiting_age;
  return a.utility > b.utility;
}

PolicyScore job_score(const PolicyJob& job, int gpus, int share, int job_index_by_age, int jobs,
                      const PolicySettings& settings) {
  if (gpus == 0) return {1, jobs - job_index_by_age, 0.0};  // waiting: the oldest counts most
  double reference = goodput_at(job, share, share);
  double speedup = reference > 0 ? goodput_at(job, gpus, share) / reference : 0;
  if (job.current > 0 && gpus != job.current) {
    // The share of the time since its last start that a restart would not have cost: small
    // for a job that just restarted, near 1 for an old one; never 0, so that among changes
    // forced on a young job (to let another in) the better one still wins.
    const double age = std::max(1.0, job.age_seconds);
    speedup *= age / (age + std::max(0.0, settings.restart_seconds));
  }
  speedup = std::clamp(speedup, 1e-3, 1e3);  // keeps the utility finite
  return {0, 0, box_cox(speedup, std::min(1.0, settings.fairness))};
}

PolicyConstraints policy_constraints(const std::vector<PolicyJob>& jobs, const PolicySettings& settings) {
  const int capacity = settings.capacity;
  if (capacity < 0) throw std::invalid_argument("capacity must be 0 or more");
  const int n = static_cast<int>(jobs.size());
  for (const auto& job : jobs) {
    if (job.min_gpus < 1 || job.max_gpus < job.min_gpus) {
      throw std::invalid_argument(fmt::format("job {}: GPUs {}:{} are not MIN:MAX", job.id, job.min_gpus, job.max_gpus));
    }
  }
  // Age order, oldest first: the waiting cost and the starvation guarantee follow it.
  std::vector<int> by_age(n);
  std::iota(by_age.begin(), by_age.end(), 0);
  std::stable_sort(by_age.begin(), by_age.end(), [&](int a, int b) {
    bool pa = jobs[a].current == 0, pb = jobs[b].current == 0;
    if (pa != pb) return !pa;  // running jobs first: they are older than any waiting one
    return jobs[a].age_seconds > jobs[b].age_seconds;
  });
  PolicyConstraints out;
  out.age_index.resize(n);
  for (int i = 0; i < n; ++i) out.age_index[by_age[i]] = i;

  // What is spoken for before anyone can be made to start: fixed jobs and running MINs.
  int reserved = 0;
  for (const auto& job : jobs) {
    if (job.current > 0 || job.pinned) reserved += allowed_gpus(job, false).front();
  }
  if (reserved > capacity) {
    throw std::invalid_argument(fmt::format("running jobs hold at least {} GPUs, more than the {} there are",
                                            reserved, capacity));
  }
  // Starving jobs, oldest first, must start while their MIN fits in what is left. The first
  // that does not fit holds back every job that waits behind it (younger): they would take
  // what the running jobs leave as they end, and it would never fit (a rigid 6-GPU job waited
  // for good while elastic jobs that came later started at their MIN of 1).
  out.must_start.assign(n, false);
  out.held_back.assign(n, false);
  std::optional<double> blocked_age;
  for (int i : by_age) {
    const auto& job = jobs[i];
    if (job.current != 0 || job.pinned) continue;
    if (blocked_age && job.age_seconds < *blocked_age) {
      out.held_back[i] = true;
      continue;
    }
    if (job.age_seconds < settings.starvation_seconds) continue;
    const int least = allowed_gpus(job, true).front();
    if (reserved + least <= capacity) {
      out.must_start[i] = true;
      reserved += least;
    } else if (!blocked_age) {
      blocked_age = job.age_seconds;
      out.blocked = job.id;
    }
  }
  return out;
}

PolicyDecision decide_allocation(const std::vector<PolicyJob>& jobs, const PolicySettings& settings) {
  const int capacity = settings.capacity;
  const int n = static_cast<int>(jobs.size());
  const PolicyConstraints constraints = policy_constraints(jobs, settings);
  const auto& age_index = constraints.age_index;
  const auto& must_start = constraints.must_start;

  // DP over jobs: best[g] = the best score of the jobs so far using exactly g GPUs.
  std::vector<std::vector<int>> choice(n, std::vector<int>(capacity + 1, -1));
  std::vector<std::optional<PolicyScore>> best(capacity + 1);
  best[0] = PolicyScore{};
  for (int i = 0; i < n; ++i) {
    const auto& job = jobs[i];
    const int share = fair_share(job, capacity, n);
    std::vector<std::optional<PolicyScore>> next(capacity + 1);
    auto allowed = constraints.held_back[i] ? std::vector<int>{0} : allowed_gpus(job, must_start[i]);
    for (auto it = allowed.rbegin(); it != allowed.rend(); ++it) {  // on a tie, more GPUs
      const int a = *it;
      if (a > capacity) continue;
      const PolicyScore term = job_score(job, a, share, age_index[i], n, settings);
      for (int used = 0; used + a <= capacity; ++used) {
        if (!best[used]) continue;
        PolicyScore value = *best[used];
        value += term;
        if (!next[used + a] || better(value, *next[used + a])) {
          next[used + a] = value;
          choice[i][used + a] = a;
        }
      }
    }
    best = std::move(next);
  }
  int end = -1;
  for (int g = 0; g <= capacity; ++g) {
    if (best[g] && (end < 0 || better(*best[g], *best[end]))) end = g;
  }
  if (end < 0) throw std::invalid_argument("no allocation meets every job's constraints");

  PolicyDecision decision;
  decision.score = *best[end];
  decision.gpus.assign(n, 0);
  for (int i = n - 1, used = end; i >= 0; --i) {
    decision.gpus[i] = choice[i][used];
    used -= decision.gpus[i];
  }
  for (int i = 0; i < n; ++i) {
    const int share = fair_share(jobs[i], capacity, n);
    double reference = goodput_at(jobs[i], share, share);
    decision.speedup.push_back(reference > 0 ? goodput_at(jobs[i], decision.gpus[i], share) / reference : 0);
  }
  return decision;
}

}  // namespace dlrun::launcher
