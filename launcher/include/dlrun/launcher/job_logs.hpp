#pragma once
// `dlrun logs JOB [--rank R] [-f]`: a submitted job's output, all ranks prefixed
// (RUN_DIR/output.log) or one rank's own (RUN_DIR/rank-R.log). Following polls the file
// and the job's state until the job has ended, then copies what is left, or until `out` fails
// or `reader_gone` says that no one reads it any more. Throws ConfigError for an unknown job or
// rank, or a started job whose logs were removed. Also the last lines of a log (`dlrun submit --wait`'s report).

#include <cstdint>
#include <functional>
#include <ostream>

#include "dlrun/launcher/job_end_report.hpp"
#include "dlrun/launcher/job_queue.hpp"

namespace dlrun::launcher {

enum class Follow { no, until_the_job_ends };

// rank < 0: the job's combined output.
void copy_job_log(JobQueue& queue, int64_t id, int rank, Follow follow, std::ostream& out,
                  const std::function<bool()>& reader_gone = {});

// The last `count` lines of the file at `path` (of its last 64 KiB at most); `exists` false
// when it cannot be read.
LogTail read_log_tail(const std::string& path, size_t count);

}  // namespace dlrun::launcher
