#pragma once
// `dlrun resize JOB N`: the rank count of a running elastic job changes. JOB is a submitted
// job's id (the store gives its supervisor and allocation; the allocation is changed first
// and given back if the resize fails) or the id `dlrun local` printed (its run directory's
// job.json gives the supervisor). Waits for the supervisor's answer: the ranks checkpoint,
// stop at the same step and restart at the new size. Throws ConfigError with what went
// wrong (no such job, not running, out of range, not enough free GPUs, the supervisor's
// own "error: …").

#include <string>

#include "dlrun/launcher/job_ref.hpp"
#include "dlrun/launcher/rank_env.hpp"

namespace dlrun::launcher {

// How long resize_job waits for the supervisor's answer by default: ranks may take a while
// to checkpoint.
inline constexpr double k_resize_answer_timeout = 600;

void resize_job(const JobRef& job, int ranks, const Environment& env,
                double answer_timeout = k_resize_answer_timeout);

}  // namespace dlrun::launcher
