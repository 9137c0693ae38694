#pragma once
// Why a PENDING job waits, in a few words, as squeue's REASON says it: "behind job 3 (fifo)",
// "waiting for 4 GPUs (2 free)", "waiting for the scheduler (…)". It follows how a job
// starts: a goodput job when the goodput scheduler starts it (scheduler_loop.hpp), any
// other only once it is the oldest pending job and fit() finds its resources free
// (JobStore::try_start). Pure, thread-safe.

#include <map>
#include <string>
#include <vector>

#include "dlrun/launcher/job_store.hpp"
#include "dlrun/launcher/policy_view.hpp"
#include "dlrun/launcher/scheduling_policy.hpp"

namespace dlrun::launcher {

// What running local jobs hold, as the store adds it up when a job starts.
Usage usage_of(const std::vector<JobRecord>& jobs);

struct QueueState {
  const std::vector<JobRecord>* active = nullptr;  // every pending and running job (any listing has them)
  Capacity capacity;
  bool scheduler_running = false;  // a live goodput scheduler holds the lease
  const std::map<int64_t, PolicyView>* policy = nullptr;  // the goodput policy's view of each job, if known
  double goodput_starving_before = 0;  // goodput jobs submitted before this have waited past starvation_seconds
};

// The GPUs of `held` (GPU id -> who holds it: Capacity::gpus_elsewhere) among `ids` (all of
// them when empty), one text per holder: "GPUs 0,1 are in use by user bob's dlrun job 4 (pid 9)".
std::vector<std::string> gpus_held_elsewhere_text(const std::map<std::string, std::string>& held,
                                                  const std::vector<std::string>& ids = {});
// The same as a suffix for a message: "; GPUs 0,1 are in use by …; GPU 3 is in use by …", or "".
std::string gpus_held_elsewhere_suffix(const std::map<std::string, std::string>& held,
                                       const std::vector<std::string>& ids = {});

// Why `job` (PENDING) waits. `policy`: what the goodput policy would give it, if known.
std::string pending_reason(const JobRecord& job, const QueueState& queue, const PolicyView* policy);

}  // namespace dlrun::launcher
