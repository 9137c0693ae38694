#include "dlrun/launcher/scheduler_loop.hpp"

#include <fcntl.h>
#include <signal.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <ctime>
#include <filesystem>
#include <optional>
#include <stdexcept>
#include <thread>

#include <fmt/format.h>
#include <fmt/ranges.h>

#include "dlrun/error.hpp"
#include "dlrun/launcher/gpu_discovery.hpp"
#include "dlrun/launcher/job_queue.hpp"
#include "dlrun/launcher/job_resize.hpp"
#include "dlrun/launcher/pending_reason.hpp"
#include "dlrun/launcher/policy_view.hpp"
#include "dlrun/launcher/process.hpp"
#include "dlrun/launcher/process_identity.hpp"
#include "dlrun/launcher/scheduler_settings.hpp"
#include "dlrun/launcher/text.hpp"
#include "dlrun/launcher/time_stamp.hpp"
#include "dlrun/log.hpp"

namespace dlrun::launcher {
namespace {

using Clock = std::chrono::steady_clock;

constexpr auto k_poll = std::chrono::milliseconds(200);  // how soon a change of the queue is seen
constexpr double k_idle_exit_seconds = 2;                 // no goodput job this long: the scheduler ends
constexpr double k_retry_seconds = 2;                     // after a round that failed (config.toml)
constexpr double k_answer_timeout = 300;                  // a resize's answer (checkpoint and stop)

std::string timestamp() { return utc_iso8601(std::time(nullptr)); }

// What the scheduler acts on: a change here runs the policy at once. Besides the store's
// columns, a program that has just said it handles the stop request (it may be resized now).
std::string queue_signature(const std::vector<JobRecord>& jobs) {
  std::string signature;
  for (const auto& job : jobs) {
    if (!job.submitted.request.uses_gpus || job.submitted.request.remote || job.submitted.slurm) continue;
    const bool resizable = job.submitted.request.goodput && job.state == JobState::running && handles_stop(job.run_dir);
    signature += fmt::format("{}:{}:{}:{}:{};", job.id, to_string(job.state), job.allocation.ranks, job.pinned,
                             resizable);
  }
  return signature;
}

// The GPUs other stores' jobs hold (gpu_claims.hpp): one they let go, or take, is a change of
// what this queue may use, weighed at once as a change of the queue is.
std::string elsewhere_signature(const JobQueue& queue) {
  std::string signature = "elsewhere:";
  for (const auto& gpu : queue.gpu_ids_elsewhere()) signature += gpu + ",";
  // Their jobs that wait for GPUs: this store's jobs may make room for them (machine_share.hpp).
  signature += "wants:";
  for (const auto& want : queue.gpu_wants_elsewhere()) {
    signature += fmt::format("{}:{}:{}:{},", want.holder.uid, want.holder.home, want.holder.job, want.gpus);
  }
  return signature;
}

bool any_goodput_job(const std::vector<JobRecord>& jobs) {
  for (const auto& job : jobs) {
    if (job.submitted.request.goodput && !is_terminal(job.state) && !job.submitted.slurm) return true;
  }
  return false;
}

// Sends every resize of `steps` at once and waits for all the answers.
std::vector<std::string> resize_all(const std::vector<ResizeStep>& steps) {
  std::vector<std::string> answers(steps.size());
  std::vector<std::thread> threads;
  for (size_t i = 0; i < steps.size(); ++i) {
    threads.emplace_back([&, i] {
      try {
        answers[i] = request_resize(*steps[i].lock, steps[i].supervisor.pid, steps[i].request(), k_answer_timeout);
      } catch (const Error& e) {
        answers[i] = std::string("error: ") + e.what();
      }
    });
  }
  for (auto& t : threads) t.join();
  return answers;
}

class Scheduler {
 public:
  explicit Scheduler(const Environment& env) : m_queue(env) {}

  JobQueue& queue() { return m_queue; }

  // One round: the policy over the queue as it is now, carried out. A round that a `change`
  // started ("the queue changed") says so when it changes nothing (people and tests see it was
  // weighed).
  void round(const std::vector<JobRecord>& jobs, const std::string& change) {
    const SchedulerSettings settings = read_scheduler_settings(m_queue.home());
    m_interval = settings.interval_seconds;
    Round r{policy_input(jobs, now_seconds()), {}, m_queue.capacity()};
    say_if_blind(r);
    PolicySettings policy = settings.policy;
    policy.capacity = r.capacity.gpus_free_of_others(usage_of(jobs).gpus_in_use);  // less other stores' jobs
    if (r.input.jobs.empty() || policy.capacity <= 0) return;
    // Other users' jobs that wait for GPUs this store's jobs hold get room, down to its fair share.
    int least_here = 0;
    for (const auto& job : r.input.jobs) {
      if (job.current > 0 || job.pinned) least_here += allowed_gpus(job, false).front();
    }
    const auto wants = m_queue.gpu_wants_elsewhere();
    const int beside = m_queue.capacity_beside_others(r.capacity.gpus, least_here, policy.starvation_seconds, wants);
    if (beside < policy.capacity) {
      if (beside != m_beside_said) {
        log::info("{} other users' jobs wait for GPUs: this store's jobs use at most {} of the {} GPUs now", timestamp(),
                  beside, r.capacity.gpus);
      }
      policy.capacity = beside;
      m_beside_said = beside;
    } else {
      m_beside_said = -1;
    }
    // A job that starves changes what the policy must do: the next round comes then, not an
    // interval later (a waiting job got room 30 s after its starvation_seconds).
    double next_starving = m_interval;
    for (const auto& job : r.input.jobs) {
      if (job.current == 0 && job.age_seconds < policy.starvation_seconds) {
        next_starving = std::min(next_starving, policy.starvation_seconds - job.age_seconds);
      }
    }
    for (const auto& want : wants) {
      const double waited = now_seconds() - want.holder.since;
      if (waited < policy.starvation_seconds) next_starving = std::min(next_starving, policy.starvation_seconds - waited);
    }
    m_interval = std::min(m_interval, std::max(1.0, next_starving + 0.1));
    try {
      r.decision = decide_allocation(r.input.jobs, policy);
      // A change only the restart penalty holds back becomes worth it as the jobs age: look
      // again every restart_seconds, not only every interval.
      PolicySettings free_restarts = policy;
      free_restarts.restart_seconds = 0;
      if (decide_allocation(r.input.jobs, free_restarts).gpus != r.decision.gpus) {
        m_interval = std::min(m_interval, std::max(1.0, policy.restart_seconds));
      }
    } catch (const std::invalid_argument& e) {
      log::warn("{} the policy cannot decide for this queue: {}", timestamp(), e.what());
      return;
    }
    std::vector<bool> goodput;
    for (const auto* record : r.input.records) goodput.push_back(record->submitted.request.goodput);
    const SchedulerPlan plan = plan_moves(r.input.jobs, r.decision, goodput);
    if (plan.empty() && !change.empty()) {
      // A job between two sizes (a resize that another scheduler or dlrun resize began) is held
      // at its size until it runs again: say so, rather than that nothing moves.
      std::vector<std::string> resizing;
      for (const auto* record : r.input.records) {
        if (record->state == JobState::rescaling) resizing.push_back(std::to_string(record->id));
      }
      log::info("{} {} ({}): every allocation stays{}", timestamp(), change,
                counted(static_cast<long long>(r.input.jobs.size()), "GPU job"),
                resizing.empty() ? ""
                                 : fmt::format(" until job{} {} {} resized (the round after weighs {} again)",
                                               resizing.size() == 1 ? "" : "s", fmt::join(resizing, ", "),
                                               resizing.size() == 1 ? "is" : "are",
                                               resizing.size() == 1 ? "it" : "them"));
    }
    resize(r, plan.shrinks, "shrink");
    // The shrinks' answers may have taken a while: what other stores' jobs hold may have changed.
    if (!plan.shrinks.empty() && r.capacity.gpus > 0) r.capacity.gpus_elsewhere = m_queue.gpus_elsewhere();
    for (const auto& move : plan.starts) {
      const JobRecord& job = *r.input.records[move.job];
      say(r, move, "start");
      if (!m_queue.store().start_scheduled(job.id, move.to, r.capacity, m_queue.run_dir(job.id))) {
        log::warn("{} job {}: {} GPUs are not free yet; next round", timestamp(), job.id, move.to);
        m_interval = std::min(m_interval, k_retry_seconds);
      }
    }
    resize(r, plan.grows, "grow");
  }

  // Seconds until the next round when the queue does not change.
  double interval() const { return m_interval; }

 private:
  struct Round {
    PolicyInput input;
    PolicyDecision decision;
    Capacity capacity;
  };

  static void say(const Round& r, const SchedulerMove& move, const char* what) {
    const JobRecord& job = *r.input.records[move.job];
    log::info("{} job {} ({}): {} {} -> {} GPU{} (predicted speedup {:.2f}x over its fair share{})", timestamp(),
              job.id, job.name, what, move.from, move.to, move.to == 1 ? "" : "s", r.decision.speedup[move.job],
              r.input.jobs[move.job].goodput.empty() ? ", no model yet" : "");
  }

  // Waiting jobs that need more GPUs than this scheduler sees on the machine (a job checked
  // when submitted: the scheduler's environment sees fewer, or a GPU has gone), said once per
  // change in scheduler.log: without it they wait with no word.
  void say_if_blind(const Round& r) {
    std::vector<std::string> blind;
    int needed = 0;
    for (size_t i = 0; i < r.input.jobs.size(); ++i) {
      const PolicyJob& job = r.input.jobs[i];
      if (job.current != 0 || job.min_gpus <= r.capacity.gpus) continue;
      blind.push_back(std::to_string(job.id));
      needed = std::max(needed, job.min_gpus);
    }
    std::string text;
    if (!blind.empty()) {
      const GpuInventory inventory = discover_gpus();
      text = fmt::format(
          "job{} {} wait{} for {} GPU{}, and this scheduler (pid {}) sees {} on this machine ({}): {} until "
          "it does (it has the environment of the job whose supervisor started it; "
          "kill {} lets the next one start)",
          blind.size() == 1 ? "" : "s", fmt::join(blind, ", "), blind.size() == 1 ? "s" : "", needed,
          needed == 1 ? "" : "s", ::getpid(), r.capacity.gpus,
          !inventory.error.empty() ? inventory.error : inventory.source, blind.size() == 1 ? "it waits" : "they wait",
          ::getpid());
    }
    if (text != m_said_blind && !text.empty()) log::warn("{} {}", timestamp(), text);
    m_said_blind = text;
  }

  // Resizes the jobs of `moves` together and waits for them all.
  void resize(const Round& r, const std::vector<SchedulerMove>& moves, const char* what) {
    std::vector<ResizeStep> steps;
    for (const auto& move : moves) {
      // Not while a `dlrun resize` of it waits for its answer (resize.hpp, ResizeLock); then the
      // job as it is now: it may have changed since the listing.
      std::shared_ptr<ResizeLock> lock = ResizeLock::try_take(r.input.records[move.job]->run_dir);
      auto job = lock ? m_queue.store().get(r.input.records[move.job]->id) : std::nullopt;
      if (!job || job->state != JobState::running || job->allocation.ranks != move.from) {
        // Changed since the listing (its ranks restarting, a resize ending): the next round comes
        // soon, not an interval later, as nothing else may change the queue meanwhile.
        m_interval = std::min(m_interval, k_retry_seconds);
        continue;
      }
      say(r, move, what);
      auto step = begin_resize(m_queue, *job, move.to, r.capacity, "scheduler", lock);
      if (!step) {
        log::warn("{} job {}: {} GPUs are not free; next round", timestamp(), job->id, move.to);
        m_interval = std::min(m_interval, k_retry_seconds);
        continue;
      }
      steps.push_back(*step);
    }
    auto answers = resize_all(steps);
    for (size_t i = 0; i < steps.size(); ++i) {
      end_resize(m_queue, steps[i], answers[i], "scheduler");
      if (answers[i].rfind("ok", 0) != 0) log::warn("{} job {}: {}", timestamp(), steps[i].id, answers[i]);
    }
  }

  JobQueue m_queue;
  std::string m_said_blind;  // say_if_blind's last word
  double m_interval = 60;  // until the next round without a change of the queue
  int m_beside_said = -1;  // the limit beside other users' waiting jobs last said, -1: none
};

// Sleeps `pause`; true when a stop signal came meanwhile.
bool stop_signal_within(const sigset_t& stop, std::chrono::milliseconds pause) {
  timespec timeout{0, static_cast<long>(pause.count()) * 1000 * 1000};
  return ::sigtimedwait(&stop, nullptr, &timeout) > 0;
}

}  // namespace

SchedulerPlan plan_moves(const std::vector<PolicyJob>& jobs, const PolicyDecision& decision,
                         const std::vector<bool>& goodput) {
  SchedulerPlan plan;
  // The jobs come in submission order, so waiting jobs start oldest first. A waiting job
  // that is not the scheduler's (fifo) starts itself once the room is there.
  for (size_t i = 0; i < jobs.size(); ++i) {
    const int from = jobs[i].current, to = decision.gpus[i];
    if (from == to) continue;
    if (from == 0) {
      if (goodput[i]) plan.starts.push_back({i, from, to});
    } else if (to < from) {
      plan.shrinks.push_back({i, from, to});
    } else {
      plan.grows.push_back({i, from, to});
    }
  }
  return plan;
}

int run_scheduler(const Environment& env) {
  const sigset_t stop = stop_signal_set();
  ::sigprocmask(SIG_BLOCK, &stop, nullptr);
  Scheduler scheduler(env);
  // What it decides, for people and tests: $DLRUN_HOME/scheduler.log.
  const std::string log_path = scheduler.queue().home() + "/scheduler.log";
  if (int fd = ::open(log_path.c_str(), O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC, 0600); fd >= 0) {
    ::dup2(fd, STDERR_FILENO);
    ::close(fd);
  }
  JobStore& store = scheduler.queue().store();
  const ProcessIdentity me = ProcessIdentity::self();
  if (!store.take_scheduler_lease(me)) return 0;
  log::info("{} scheduler {} started", timestamp(), me.pid);
  std::string last_signature = "-";
  std::string last_queue = "-";  // its part that is this queue's jobs (the rest: other stores' GPUs)
  std::string last_error;  // said once, until it changes or a round succeeds
  bool look_again = false;  // the queue changed while the last round ran
  auto last_round = Clock::now() - std::chrono::hours(1);
  std::optional<Clock::time_point> idle_since;
  while (true) {
    auto jobs = store.list(false, 0);
    if (!any_goodput_job(jobs)) {
      if (!idle_since) idle_since = Clock::now();
      if (std::chrono::duration<double>(Clock::now() - *idle_since).count() >= k_idle_exit_seconds) break;
    } else {
      idle_since.reset();
      const std::string queue_part = queue_signature(jobs);
      const std::string signature = queue_part + elsewhere_signature(scheduler.queue());
      const double since = std::chrono::duration<double>(Clock::now() - last_round).count();
      // After a failed round (config.toml being edited), or one the queue changed under, the
      // next comes soon, not an interval later.
      const double wait = last_error.empty() && !look_again ? scheduler.interval() : k_retry_seconds;
      if (signature != last_signature || since >= wait) {
        try {
          // What started the round, as scheduler.log says it when nothing moves.
          std::string change;
          if (signature != last_signature) {
            change = queue_part == last_queue ? "other users' jobs took or let go of GPUs" : "the queue changed";
          }
          scheduler.round(jobs, change);
          if (!last_error.empty()) log::info("{} the scheduler decides again", timestamp());
          last_error.clear();
        } catch (const Error& e) {
          if (e.what() != last_error) log::error("{} {}", timestamp(), e.what());
          last_error = e.what();
        }
        last_round = Clock::now();
        last_queue = queue_signature(store.list(false, 0));
        last_signature = last_queue + elsewhere_signature(scheduler.queue());
        // What changed while the round ran, its own moves or a job that ended meanwhile (which no
        // later change would announce: a job growing into the GPUs of one that ended waited an
        // interval), is weighed by a round soon.
        look_again = last_signature != signature;
      }
    }
    if (stop_signal_within(stop, k_poll)) break;
  }
  store.release_scheduler_lease(me);
  log::info("{} scheduler {} ended", timestamp(), me.pid);
  return 0;
}

}  // namespace dlrun::launcher
