#pragma once
// `dlrun resize JOB N`: the rank count of a running elastic job changes. JOB is a submitted
// job's id (the store gives its supervisor and allocation) or the id `dlrun local` printed
// (its run directory's job.json gives the supervisor). Waits for the supervisor's answer:
// the ranks checkpoint, stop at the same step and restart at the new size. Throws
// ConfigError with what went wrong (no such job, not running, out of range, not enough free
// GPUs, the supervisor's own "error: …"), and an Error with k_resize_refused_exit when the
// job's ranks have not said that they handle the stop request (unless Unannounced::restart:
// then they are stopped and restarted at the new size).
//
// A submitted job's GPUs move so that no two jobs' ranks ever share one: a grow takes the
// new GPUs in the store before its ranks restart on them; a shrink gives GPUs back only once
// the ranks that used them have stopped (the supervisor's "ok"). The goodput scheduler
// resizes through the same steps (begin_resize, request_resize, end_resize) for many jobs
// at once.

#include <memory>
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

// dlrun's exit code when a resize is refused because the job's program has not said that it
// handles the stop request (docs/exit-codes.md): nothing was done.
inline constexpr int k_resize_refused_exit = 3;

enum class ResizeOutcome {
  stopped_at_a_step,  // the ranks stopped at a step they agreed on and run at the new size
  restarted,          // they were stopped (Unannounced::restart) and started again at the new size
  killed,             // asked to stop at a step, they had not within the grace period: killed, restarted
  unpinned,           // "auto": the goodput scheduler sizes the job again
  unchanged,          // it runs that many ranks already: nothing was stopped (a goodput job is pinned there)
};

// What a resize did, and the size a goodput job is pinned at now (0: none; the scheduler sizes it).
struct ResizeResult {
  ResizeOutcome outcome = ResizeOutcome::unchanged;
  int64_t job = 0;  // its number; 0 for a run without one
  int pinned = 0;
};

// `ranks` empty: "auto", the goodput scheduler may size the job again (its pin is removed).
// A number pins a goodput job at it (docs/scheduling.md).
ResizeResult resize_job(const JobRef& job, std::optional<int> ranks, Unannounced unannounced, const Environment& env,
                         double answer_timeout = k_resize_answer_timeout);

// One resize of a running submitted job, in steps.
struct ResizeStep {
  int64_t id = 0;
  std::string run_dir;
  ProcessIdentity supervisor;
  Allocation before, after;
  bool grow = false;
  std::shared_ptr<ResizeLock> lock;  // held from the store's change until its outcome is recorded
  ResizeRequest request() const { return {after.ranks, after.gpu_ids}; }
};
// Takes the GPUs a grow needs in the store (nullopt: they are not free), or works out which
// a shrink keeps (its first ones). `cause` is recorded with the change. `job` is as the store
// had it once `lock` (the job's ResizeLock) was taken; the step holds the lock.
std::optional<ResizeStep> begin_resize(JobQueue& queue, const JobRecord& job, int ranks, const Capacity& capacity,
                                       const std::string& cause, std::shared_ptr<ResizeLock> lock);
// After the supervisor's answer (resize.hpp; empty: none came): a shrink's GPUs
// are given back on "ok", a grow's on anything else.
void end_resize(JobQueue& queue, const ResizeStep& step, const std::string& answer, const std::string& cause);

// A submitted job's supervisor, from time to time: where the store records an allocation other
// than `running` (the one its ranks run at) for the RUNNING job `id` while no requester holds
// its ResizeLock and no request waits in `run_dir`, the requester died between taking a grow's
// GPUs and recording the outcome; `running` is recorded again ("undo"). True when it was.
bool undo_abandoned_resize(JobQueue& queue, int64_t id, const std::string& run_dir, const Allocation& running);

}  // namespace dlrun::launcher
