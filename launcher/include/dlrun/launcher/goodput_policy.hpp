#pragma once
// The goodput scheduler's decision (Pollux, OSDI'21, on one machine), without I/O: given the
// machine's GPUs and the jobs with their predicted goodput at every GPU count, how many GPUs
// each job gets next. docs/scheduling.md has the objective; in short:
//
//   speedup_j(a)  = goodput_j(a) / goodput_j(fair share)          fair share = capacity / jobs
//   penalised_j   = speedup_j(a) · age_j / (age_j + restart)      when a ≠ current
//   utility_j     = (penalised_j^p − 1) / p   (log at p = 0)     p ≤ 1: the fairness knob
//   maximise, in this order: the number of jobs that run; how old the waiting ones are not
//   (Σ over waiting jobs of their age rank, oldest = largest); Σ utility_j
//   subject to Σ a_j ≤ capacity and each job's constraints
//
// The sum is separable, so the optimum is found exactly by dynamic programming over jobs ×
// GPUs (O(jobs · capacity · max GPUs per job)), where Pollux searches with a genetic
// algorithm. Constraints: a running job keeps between its MIN and MAX (it is never stopped);
// a rigid or pinned job keeps what it has; a pending job gets 0 or MIN..MAX, and one that has
// waited longer than `starvation_seconds` must get its MIN when the GPUs not held by rigid
// and pinned jobs and running jobs' MINs allow (oldest first); while the oldest such job does not
// fit, no job younger than it may start (it gets what the running jobs leave). Comparing the three parts
// in order (not one weighted sum) keeps "start whoever can start, oldest first" whatever the
// utilities' scale. Pure, deterministic, thread-safe.

#include <cstdint>
#include <optional>
#include <vector>

namespace dlrun::launcher {

struct PolicyJob {
  int64_t id = 0;
  int min_gpus = 1;
  int max_gpus = 1;
  bool elastic = true;        // may change size (MIN < MAX, a program that can resize)
  std::optional<int> pinned;  // `dlrun resize` set its size: it keeps it
  int current = 0;            // GPUs now; 0: pending
  double age_seconds = 0;     // running: since its last (re)start; pending: since submitted
  // Predicted goodput with 0 … max_gpus GPUs (index = GPUs; [0] is 0). Empty: no model yet,
  // and the neutral prediction is used (goodput ∝ GPUs up to the fair share, a tenth of that
  // slope beyond it).
  std::vector<double> goodput;
};

struct PolicySettings {
  int capacity = 0;                 // GPUs of the machine
  double fairness = -1;             // p: 1 = the largest total speedup, lower = fairer (Pollux: -1)
  double restart_seconds = 10;      // what a resize costs a job (checkpoint, restart, the steps to re-fit)
  double starvation_seconds = 600;  // a pending job older than this must get its MIN
};

// What an allocation is worth, compared part by part (better()).
struct PolicyScore {
  int waiting = 0;          // jobs left at 0 GPUs
  int64_t waiting_age = 0;  // Σ of their age ranks (the oldest job ranks highest)
  double utility = 0;       // Σ utility of the jobs that run
  PolicyScore& operator+=(const PolicyScore& o);
};
bool better(const PolicyScore& a, const PolicyScore& b);

struct PolicyDecision {
  std::vector<int> gpus;         // per job, in the input's order
  std::vector<double> speedup;   // per job at its new allocation (before the restart penalty)
  PolicyScore score;
};

// Throws std::invalid_argument for inputs that cannot be met (a job with MIN > MAX, running
// jobs' fixed shares beyond the capacity, …).
PolicyDecision decide_allocation(const std::vector<PolicyJob>& jobs, const PolicySettings& settings);

// The score of one job at `gpus` (the term the DP sums), for tests and explanations.
// `job_index_by_age`: 0 for the oldest of `jobs`.
PolicyScore job_score(const PolicyJob& job, int gpus, int fair_share, int job_index_by_age, int jobs,
                      const PolicySettings& settings);

// What decide_allocation() works out before its search (tests enumerate with it): each job's
// age rank (0 = the oldest; running jobs count as older than waiting ones) and whether it
// must start (waited past starvation_seconds, and its MIN fits, oldest first). Throws
// std::invalid_argument as decide_allocation() does.
struct PolicyConstraints {
  std::vector<int> age_index;
  std::vector<bool> must_start;
  // Waiting jobs younger than the oldest starving job whose MIN does not fit (`blocked`): they
  // may not start before it does.
  std::vector<bool> held_back;
  std::optional<int64_t> blocked;
};
PolicyConstraints policy_constraints(const std::vector<PolicyJob>& jobs, const PolicySettings& settings);

// The GPU counts `job` may have next (ascending).
std::vector<int> allowed_gpus(const PolicyJob& job, bool must_start);

// capacity / number of jobs, clipped to the job's MIN..MAX (at least 1).
int fair_share(const PolicyJob& job, int capacity, int jobs);

}  // namespace dlrun::launcher
