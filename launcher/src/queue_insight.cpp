#include "dlrun/launcher/queue_insight.hpp"

#include "dlrun/launcher/job_queue.hpp"
#include "dlrun/launcher/pending_reason.hpp"
#include "dlrun/launcher/queue_settings.hpp"
#include "dlrun/launcher/run_retention.hpp"
#include "dlrun/error.hpp"
#include "dlrun/launcher/scheduler_settings.hpp"
#include "dlrun/log.hpp"

#include <set>

namespace dlrun::launcher {

QueueInsight queue_insight(JobQueue& queue, double now, const std::vector<JobRecord>& jobs) {
  QueueInsight insight;
  QueueState state;
  state.active = &jobs;
  state.capacity = queue.capacity();
  insight.gpus_elsewhere = state.capacity.gpus_elsewhere;
  // A mistake in config.toml does not hide the user's jobs: it is said, once (dlrun status
  // --watch redraws), and the policy's view is the default settings' (the scheduler itself, and
  // the daily clean-up, wait for the file to be fixed).
  PolicySettings settings;
  std::string scheduler_error, retention_error;
  try {
    settings = read_scheduler_settings(queue.home()).policy;
  } catch (const ConfigError& e) {
    scheduler_error = e.what();
  }
  try {
    (void)read_retention_settings(queue.home());
  } catch (const ConfigError& e) {
    retention_error = e.what();
  }
  std::string queue_error;
  try {
    (void)read_queue_settings(queue.home());
  } catch (const ConfigError& e) {
    queue_error = e.what();
  }
  static std::set<std::string> said;
  auto say = [](const std::string& error, const char* what) {
    if (error.empty() || !said.insert(error + what).second) return;
    log::warn("{} ({})", error, what);
  };
  if (scheduler_error == retention_error) {  // one mistake in the file, both readers stopped at it
    say(scheduler_error, "the goodput policy is shown under the default settings; old run directories are not "
                         "removed until it is fixed");
  } else {
    say(scheduler_error, "what the goodput policy would give is shown under the default settings");
    say(retention_error, "old run directories are not removed until it is fixed");
  }
  if (queue_error != scheduler_error && queue_error != retention_error) {
    say(queue_error, "CPU jobs are counted against DLRUN_CPU_SLOTS or the usable cores until it is fixed");
  }
  insight.policy =
      policy_view(jobs, state.capacity.gpus_free_of_others(usage_of(jobs).gpus_in_use), now, settings);
  bool any_pending = false;
  for (const auto& job : jobs) any_pending = any_pending || job.state == JobState::pending;
  if (!any_pending) return insight;
  state.scheduler_running = queue.store().scheduler_lease_holder().has_value();
  state.goodput_starving_before = now - settings.starvation_seconds;
  state.policy = &insight.policy;
  for (const auto& job : jobs) {
    if (job.state != JobState::pending) continue;
    auto view = insight.policy.find(job.id);
    insight.waiting[job.id] = pending_reason(job, state, view == insight.policy.end() ? nullptr : &view->second);
  }
  return insight;
}

}  // namespace dlrun::launcher
