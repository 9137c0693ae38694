#pragma once
// The goodput scheduler: the process that shares this machine's GPUs among the queue's jobs
// by the goodput policy (goodput_policy.hpp, over policy_input()), and carries its decisions
// out through the resize path (job_resize.hpp): jobs to shrink first (their GPUs come back
// once their ranks have stopped), then waiting jobs to start (their supervisors see RUNNING),
// then jobs to grow. docs/scheduling.md.
//
// No daemon: `dlrun _schedule` is started, detached, by whoever finds a goodput job active
// and no scheduler alive (JobQueue::ensure_scheduler: a goodput job's supervisor while it
// waits and runs, one that ends, any dlrun command's sweep), and it ends by itself once no
// goodput job is active. One runs at a time: a lease in the job store names it (pid and start
// time), and a scheduler killed with -9 leaves a lease the next one takes over. The
// decisions live in the store, so nothing is lost with it.
//
// The policy runs on every change of the queue (an arrival, a start, an end, a resize; seen
// within a fraction of a second) and every interval_seconds ($DLRUN_HOME/config.toml), as
// the jobs' published models change. Its decisions go to $DLRUN_HOME/scheduler.log.

#include <string>
#include <vector>

#include "dlrun/launcher/goodput_policy.hpp"
#include "dlrun/launcher/rank_env.hpp"

namespace dlrun::launcher {

// The body of `dlrun _schedule`: returns 0 when it ends (no goodput job left, a stop
// signal, another scheduler holds the lease).
int run_scheduler(const Environment& env);

// What one round changes, from the policy's decision over `jobs` (pure): which jobs go to
// how many GPUs, in the order they are carried out.
struct SchedulerMove {
  size_t job = 0;  // index into the policy's jobs
  int from = 0, to = 0;
};
struct SchedulerPlan {
  std::vector<SchedulerMove> shrinks, starts, grows;
  bool empty() const { return shrinks.empty() && starts.empty() && grows.empty(); }
};
SchedulerPlan plan_moves(const std::vector<PolicyJob>& jobs, const PolicyDecision& decision,
                         const std::vector<bool>& goodput);

}  // namespace dlrun::launcher
