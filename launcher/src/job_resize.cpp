#include "dlrun/launcher/job_resize.hpp"

#include <chrono>
#include <thread>

#include <fmt/format.h>

#include "dlrun/error.hpp"
#include "dlrun/launcher/job_queue.hpp"
#include "dlrun/launcher/pending_reason.hpp"
#include "dlrun/launcher/run_dir.hpp"
#include "dlrun/launcher/run_record.hpp"
#include "dlrun/launcher/text.hpp"

namespace dlrun::launcher {
namespace {

// What the supervisor answered, as resize_job's result or its exception.
ResizeOutcome outcome_of(const std::string& answer, const std::string& job, int ranks) {
  if (answer.rfind("error: ", 0) == 0) {
    // A job between two sizes (stopping, restarting) takes one a moment later: 75, sysexits'
    // "temporary failure, try again", where 2 says a retry cannot help.
    const bool later = answer.find("try again") != std::string::npos;
    throw Error(fmt::format("job {}: {}", job, answer.substr(7)), later ? exit_code::k_temp_failure : exit_code::k_usage);
  }
  const std::string refused = k_resize_refused;
  if (answer.rfind(refused, 0) == 0) {
    throw Error(fmt::format("job {}: not resized: {}. To restart it at {} rank{} anyway (from its last checkpoint, "
                            "if it saves one): dlrun resize --force {} {}",
                            job, answer.substr(refused.size()), ranks, ranks == 1 ? "" : "s", job, ranks),
                k_resize_refused_exit);
  }
  const auto ends_with = [&answer](const std::string& word) {
    const std::string tail = " " + word;
    return answer.size() > tail.size() && answer.compare(answer.size() - tail.size(), tail.size(), tail) == 0;
  };
  if (ends_with(k_resize_restarted)) return ResizeOutcome::restarted;
  if (ends_with(k_resize_killed)) return ResizeOutcome::killed;
  return ResizeOutcome::stopped_at_a_step;
}

// A job started with dlrun local: its run directory's job.json names its supervisor.
ResizeOutcome resize_local_run(const std::string& job, std::optional<int> ranks, Unannounced unannounced,
                               const Environment& env, double timeout) {
  const std::string run_dir = fmt::format("{}/runs/{}", dlrun_home(env), job);
  auto record = read_run_record(run_dir);
  if (!record) {
    throw ConfigError(fmt::format("no job {} (neither a submitted job nor a dlrun local run in {}/runs)", job,
                                  dlrun_home(env)));
  }
  if (!ranks) throw ConfigError(fmt::format("job {}: 'auto' is for submitted jobs the goodput scheduler sizes", job));
  if (record->state != "running" || record->dlrun_pid <= 0) throw ConfigError(fmt::format("job {} is not running", job));
  ResizeRequest request{*ranks, {}, unannounced};
  return outcome_of(request_resize(run_dir, static_cast<int>(record->dlrun_pid), request, timeout), job, *ranks);
}

ResizeOutcome resize_submitted(JobQueue& queue, int64_t id, std::optional<int> ranks, Unannounced unannounced,
                               double timeout) {
  auto job = queue.store().get(id);
  check_owner(*job, "resize");
  const auto& request = job->submitted.request;
  if (!ranks) {
    if (is_terminal(job->state)) throw ConfigError(fmt::format("job {} has ended ({})", id, to_string(job->state)));
    if (job->submitted.origin != JobOrigin::submit) {
      throw ConfigError(fmt::format("job {}: 'auto' is for submitted jobs the goodput scheduler sizes; this one runs "
                                    "in the foreground (dlrun {}), at the size you give it",
                                    id, job->submitted.origin == JobOrigin::run ? "run" : "local"));
    }
    if (!request.goodput) {
      throw ConfigError(fmt::format("job {}: 'auto' is for jobs the goodput scheduler sizes; this one has "
                                    "policy = \"fifo\"",
                                    id));
    }
    // The scheduler sees the change within 0.2 s; the job's supervisor keeps one alive.
    queue.store().set_pinned(id, 0);
    return ResizeOutcome::unpinned;
  }
  // One resize of a submitted job at a time, from before its store records a grow's GPUs until
  // the outcome is recorded (resize.hpp, ResizeLock): the job is read again once it is this one's
  // turn.
  std::shared_ptr<ResizeLock> lock;
  if (job->submitted.origin == JobOrigin::submit && job->state == JobState::running) {
    // Another resize under way (the scheduler's, another dlrun resize) answers within seconds or
    // minutes: try again then, rather than wait here without a word.
    lock = ResizeLock::wait_for(job->run_dir, 2.0);
    if (!lock) {
      throw Error(fmt::format("job {} is being resized by another request (dlrun resize, or the goodput "
                              "scheduler): try again once it runs at its new size",
                              id),
                  exit_code::k_temp_failure);
    }
    job = queue.store().get(id);
  }
  if (job->state == JobState::rescaling) {
    throw Error(fmt::format("job {} is RESCALING (another resize): try again once it runs", id),
                exit_code::k_temp_failure);
  }
  if (job->state != JobState::running) {
    throw ConfigError(fmt::format("job {} is {}, not RUNNING", id, to_string(job->state)));
  }
  if (job->submitted.origin == JobOrigin::run || request.remote) {
    throw ConfigError(fmt::format("job {} runs on several hosts (dlrun run, kind = \"ssh\"): such a job is not "
                                  "resized; it restarts whole on failure (docs/elastic.md)",
                                  id));
  }
  if (auto why = check_resize(*ranks, request.min_ranks, request.max_ranks); !why.empty()) {
    throw ConfigError(fmt::format("job {}: {}", id, why));
  }
  if (job->allocation.ranks == *ranks) {
    // Its size already: nothing stops (a restart for nothing, counted as a resize, it was);
    // a goodput job is pinned there, as the user asked.
    if (request.goodput) queue.store().set_pinned(id, *ranks);
    return ResizeOutcome::unchanged;
  }
  // The user's size holds until `dlrun resize JOB auto`: the scheduler does not undo it. The
  // pin comes first, so no round of the scheduler sees the new size unpinned; a resize that
  // fails puts the old pin back.
  if (request.goodput) queue.store().set_pinned(id, *ranks);
  auto unpin = [&] {
    if (request.goodput) queue.store().set_pinned(id, job->pinned);
  };
  if (job->submitted.origin != JobOrigin::submit) {
    // A run in the foreground: its own supervisor holds its GPUs and records its new size.
    ResizeRequest direct{*ranks, {}, unannounced};
    return outcome_of(request_resize(job->run_dir, job->supervisor.pid, direct, timeout), std::to_string(id), *ranks);
  }
  const Capacity capacity = queue.capacity();
  // More than the machine has is never, not "now" (an elastic range is taken at submit as long
  // as its least fits).
  const int most = request.uses_gpus ? capacity.gpus : capacity.cpu_slots;
  if (*ranks > most) {
    unpin();
    throw ConfigError(fmt::format("job {}: {} can never run here: this machine has {}", id, counted(*ranks, "rank"),
                                  counted(most, request.uses_gpus ? "GPU" : "CPU slot")));
  }
  auto step = begin_resize(queue, *job, *ranks, capacity, "resize", lock);
  if (!step) {
    unpin();
    // Other users' jobs are not in dlrun status's table: say whose GPUs they are; and which of
    // this queue's jobs hold the rest (the scheduler does not shrink them for a pinned size).
    const std::string elsewhere = request.uses_gpus ? gpus_held_elsewhere_suffix(capacity.gpus_elsewhere) : "";
    std::vector<std::string> holders;
    std::string example;
    for (const auto& other : queue.store().list(false, 0)) {
      if (other.id == id || is_terminal(other.state) || other.allocation.ranks <= 0) continue;
      if (other.submitted.request.uses_gpus != request.uses_gpus) continue;
      const int held = request.uses_gpus ? static_cast<int>(other.allocation.gpu_ids.size()) : other.allocation.ranks;
      if (held <= 0) continue;
      holders.push_back(fmt::format("job {} ({}) has {}", other.id, other.name,
                                    counted(held, request.uses_gpus ? "GPU" : "CPU slot")));
      if (example.empty() && other.submitted.request.min_ranks < held) example = std::to_string(other.id);
    }
    std::string here;
    if (!holders.empty()) {
      here = fmt::format("; in use here: {}{}", listed(holders),
                         example.empty() ? "" : fmt::format(" (dlrun resize {} N shrinks one first)", example));
    }
    throw ConfigError(fmt::format("job {}: not enough free {} for {} now{}{}", id,
                                  request.uses_gpus ? "GPUs" : "CPU slots", counted(*ranks, "rank"), here, elsewhere));
  }
  ResizeRequest resize_request = step->request();
  resize_request.unannounced = unannounced;
  std::string answer;
  try {
    answer = request_resize(*step->lock, step->supervisor.pid, resize_request, timeout);
  } catch (const Error& e) {
    end_resize(queue, *step, "", "resize");
    unpin();
    // Cancelled (or ended) meanwhile: said as what it is, not as dlrun's own failure (70). Its
    // end may be recorded a moment after its supervisor is gone (dlrun cancel --force records
    // it once nothing of the job runs): look for a few seconds.
    if (!step->supervisor.alive()) {
      for (int i = 0; i < 100; ++i) {
        if (auto now = queue.store().get(id); now && is_terminal(now->state)) {
          throw ConfigError(fmt::format("job {} ended ({}) before it was resized", id, to_string(now->state)));
        }
        std::this_thread::sleep_for(std::chrono::milliseconds(100));
      }
    }
    throw;
  } catch (...) {
    end_resize(queue, *step, "", "resize");
    unpin();
    throw;
  }
  end_resize(queue, *step, answer, "resize");
  if (answer.rfind("ok", 0) != 0) unpin();
  return outcome_of(answer, std::to_string(id), *ranks);
}

}  // namespace

std::optional<ResizeStep> begin_resize(JobQueue& queue, const JobRecord& job, int ranks, const Capacity& capacity,
                                       const std::string& cause, std::shared_ptr<ResizeLock> lock) {
  ResizeStep step;
  step.lock = std::move(lock);
  step.id = job.id;
  step.run_dir = job.run_dir;
  step.supervisor = job.supervisor;
  step.before = job.allocation;
  step.grow = ranks > job.allocation.ranks;
  if (step.grow) {
    auto after = queue.store().resize_allocation(job.id, ranks, capacity, cause);
    if (!after) return std::nullopt;
    step.after = *after;
    return step;
  }
  step.after.ranks = ranks;
  if (!job.allocation.gpu_ids.empty()) {
    step.after.gpu_ids.assign(job.allocation.gpu_ids.begin(),
                              job.allocation.gpu_ids.begin() + std::min<size_t>(ranks, job.allocation.gpu_ids.size()));
  }
  return step;
}

void end_resize(JobQueue& queue, const ResizeStep& step, const std::string& answer, const std::string& cause) {
  const bool ok = answer.rfind("ok", 0) == 0;
  if (step.grow && !ok) queue.store().set_allocation(step.id, step.before, "undo");
  if (!step.grow && ok && step.after.ranks != step.before.ranks) queue.store().set_allocation(step.id, step.after, cause);
}

bool undo_abandoned_resize(JobQueue& queue, int64_t id, const std::string& run_dir, const Allocation& running) {
  auto lock = ResizeLock::try_take(run_dir);
  if (!lock || !lock->held() || resize_requested(run_dir)) return false;
  auto job = queue.store().get(id);
  if (!job || job->state != JobState::running) return false;
  if (job->allocation.ranks == running.ranks && job->allocation.gpu_ids == running.gpu_ids) return false;
  queue.store().set_allocation(id, running, "undo");
  return true;
}

ResizeResult resize_job(const JobRef& job, std::optional<int> ranks, Unannounced unannounced, const Environment& env,
                        double answer_timeout) {
  if (ranks && *ranks < 1) throw ConfigError(fmt::format("resize to {} ranks: must be at least 1", *ranks));
  if (!ranks && unannounced == Unannounced::restart) {
    throw ConfigError("--force goes with a number of ranks: the goodput scheduler resizes only programs that "
                      "handle the stop request");
  }
  JobQueue queue(env);
  std::optional<int64_t> number = job.number;
  if (!number) {
    if (auto named = queue.store().find_by_name(job.text, NamedJob::active_first)) number = named->id;
  }
  if (number) {
    if (!queue.store().get(*number)) {
      throw ConfigError(fmt::format("no job {} (dlrun status --all lists every job)", job.text));
    }
    ResizeResult result{resize_submitted(queue, *number, ranks, unannounced, answer_timeout), *number, 0};
    if (auto now = queue.store().get(*number)) result.pinned = now->pinned;
    return result;
  }
  // A run without a number (an older dlrun's, or one whose store could not be opened).
  return {resize_local_run(job.text, ranks, unannounced, env, answer_timeout), 0, 0};
}

}  // namespace dlrun::launcher
