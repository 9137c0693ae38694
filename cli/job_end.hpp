#pragma once
// What `dlrun submit --wait` and `dlrun wait` print when a job has ended: its end report
// (launcher/job_end_report.hpp) with the last lines of the failing rank's log.

#include <cstdint>
#include <iosfwd>

#include "dlrun/launcher/job_queue.hpp"

namespace dlrun::cli {

// Prints job `id`'s end report to `out`, with up to `tail_lines` lines of its failing rank's
// log when it FAILED (0: none). ConfigError when the store has no such job.
void print_job_end(launcher::JobQueue& queue, int64_t id, int tail_lines, std::ostream& out);

}  // namespace dlrun::cli
