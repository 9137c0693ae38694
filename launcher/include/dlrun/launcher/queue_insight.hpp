#pragma once
// What `dlrun status` shows of each job beside its record in the store: what the goodput
// policy would give it (policy_view.hpp) and, while it is PENDING, why it waits
// (pending_reason.hpp). Both read the machine's capacity (once), the scheduler's settings
// and lease, and the run directories' models. Not thread-safe (a JobQueue is not).

#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include "dlrun/launcher/job_store.hpp"
#include "dlrun/launcher/policy_view.hpp"

namespace dlrun::launcher {

class JobQueue;

// By job id; a job not in a map shows "-" (or null).
using PolicyViews = std::map<int64_t, PolicyView>;

struct QueueInsight {
  PolicyViews policy;
  std::map<int64_t, std::string> waiting;  // why each PENDING job waits
  // GPUs that jobs of other stores hold now (another user's queue: Capacity::gpus_elsewhere),
  // each with who holds it: dlrun status names them under its table.
  std::map<std::string, std::string> gpus_elsewhere;
};

// For the jobs of `jobs` that are pending or running, which must hold every active job (any
// listing does).
QueueInsight queue_insight(JobQueue& queue, double now, const std::vector<JobRecord>& jobs);

}  // namespace dlrun::launcher
