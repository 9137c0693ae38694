#pragma once
// `dlrun resize JOB N`: the rank count of a running elastic job changes. JOB is a submitted
// job's id (the store gives its supervisor and allocation) or the id `dlrun local` printed
// (its run directory's job.json gives the supervisor). Waits for the supervisor's answer:
// the ranks checkpoint, stop at the same step and restart at the new size. Throws
// ConfigError with what went wrong (no such job, not running, out of range, not enough free
// GPUs, the supervisor's own "error: …").
//
// A submitted job's GPUs move so that no two jobs' ranks ever share one: a grow takes the
// new GPUs in the store before its ranks restart on them; a shrink gives GPUs back only once
// the ranks that used them have stopped (the supervisor's "ok"). The goodput scheduler
// resizes through the same steps (begin_resize, request_resize, end_resize) for many jobs
// at once.

#include <optional>
#include <string>

#include "dlrun/launcher/job_ref.hpp"
#include "dlrun/launcher/job_store.hpp"
#include "dlrun/launcher/rank_env.hpp"
#include "dlrun/launcher/resize.hpp"

namespace dlrun::launcher {

class JobQueue;

// How long resize_job waits for the supervisor's answer by default: ranks may take a while
// to checkpoint.
inline constexpr double k_resize_answer_timeout = 600;

// `ranks` empty: "auto", the goodput scheduler may size the job again (its pin is removed).
// A number pins a goodput job at it (docs/scheduling.md).
void resize_job(const JobRef& job, std::optional<int> ranks, const Environment& env,
                double answer_timeout = k_resize_answer_timeout);

// One resize of a running submitted job, in steps.
struct ResizeStep {
  int64_t id = 0;
  std::string run_dir;
  int supervisor_pid = 0;
  Allocation before, after;
  bool grow = false;
  ResizeRequest request() const { return {after.ranks, after.gpu_ids}; }
};
// Takes the GPUs a grow needs in the store (nullopt: they are not free), or works out which
// a shrink keeps (its first ones). `cause` is recorded with the change.
std::optional<ResizeStep> begin_resize(JobQueue& queue, const JobRecord& job, int ranks, const Capacity& capacity,
                                       const std::string& cause);
// After the supervisor's answer ("ok N" or "error: …"; empty: none came): a shrink's GPUs
// are given back on "ok", a grow's on anything else.
void end_resize(JobQueue& queue, const ResizeStep& step, const std::string& answer, const std::string& cause);

}  // namespace dlrun::launcher
