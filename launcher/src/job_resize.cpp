#include "dlrun/launcher/job_resize.hpp"

#include <fmt/format.h>

#include "dlrun/error.hpp"
#include "dlrun/launcher/job_queue.hpp"
#include "dlrun/launcher/resize.hpp"
#include "dlrun/launcher/run_dir.hpp"
#include "dlrun/launcher/run_record.hpp"
#include "dlrun/launcher/text.hpp"

namespace dlrun::launcher {
namespace {

void throw_if_error(const std::string& answer, const std::string& job) {
  if (answer.rfind("error: ", 0) == 0) throw ConfigError(fmt::format("job {}: {}", job, answer.substr(7)));
}

// A job started with dlrun local: its run directory's job.json names its supervisor.
void resize_local_run(const std::string& job, int ranks, const Environment& env, double timeout) {
  const std::string run_dir = fmt::format("{}/runs/{}", dlrun_home(env), job);
  auto record = read_run_record(run_dir);
  if (!record) {
    throw ConfigError(fmt::format("no job {} (neither a submitted job nor a dlrun local run in {}/runs)", job,
                                  dlrun_home(env)));
  }
  if (record->state != "running" || record->dlrun_pid <= 0) throw ConfigError(fmt::format("job {} is not running", job));
  throw_if_error(request_resize(run_dir, static_cast<int>(record->dlrun_pid), {ranks, {}}, timeout), job);
}

void resize_submitted(JobQueue& queue, int64_t id, int ranks, double timeout) {
  auto job = queue.store().get(id);
  check_owner(*job, "resize");
  if (job->state != JobState::running) {
    throw ConfigError(fmt::format("job {} is {}, not RUNNING", id, to_string(job->state)));
  }
  const auto& request = job->submitted.request;
  if (auto why = check_resize(ranks, request.min_ranks, request.max_ranks); !why.empty()) {
    throw ConfigError(fmt::format("job {}: {}", id, why));
  }
  Allocation before = job->allocation;
  auto after = queue.store().resize_allocation(id, ranks, queue.capacity());
  if (!after) {
    throw ConfigError(fmt::format("job {}: not enough free {} for {} ranks now", id,
                                  request.uses_gpus ? "GPUs" : "CPU slots", ranks));
  }
  try {
    throw_if_error(request_resize(job->run_dir, job->supervisor.pid, {ranks, after->gpu_ids}, timeout),
                   std::to_string(id));
  } catch (...) {
    queue.store().restore_allocation(id, before);
    throw;
  }
}

}  // namespace

void resize_job(const JobRef& job, int ranks, const Environment& env, double answer_timeout) {
  if (ranks < 1) throw ConfigError(fmt::format("resize to {} ranks: must be at least 1", ranks));
  if (job.number) {
    JobQueue queue(env);
    if (!queue.store().get(*job.number)) {
      throw ConfigError(fmt::format("no job {} (dlrun status --all lists every job)", job.text));
    }
    resize_submitted(queue, *job.number, ranks, answer_timeout);
    return;
  }
  resize_local_run(job.text, ranks, env, answer_timeout);
}

}  // namespace dlrun::launcher
