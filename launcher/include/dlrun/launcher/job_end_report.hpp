#pragma once
// What `dlrun submit --wait` prints once the job has ended, so that a CI log says what
// happened without another command: one line with the final state, the time, the exit code
// and why (the failing rank and its exit code or signal); for a FAILED job, the last lines of
// the failing rank's log (RUN_DIR/rank-N.log), or of the job's output (RUN_DIR/output.log)
// when no one rank failed (a lost supervisor, a job that could not start). docs/jobs.md.
// Pure; thread-safe.

#include <string>
#include <vector>

#include "dlrun/launcher/job_store.hpp"

namespace dlrun::launcher {

// The last lines of a log file, and which file.
struct LogTail {
  std::string path;
  std::vector<std::string> lines;
  bool exists = false;
};

// "Job 7 (train) SUCCEEDED in 0:12 (2 ranks)", "Job 7 (train) FAILED after 0:03 with exit
// code 3: rank 1 exited with code 3 (1 restart)".
std::string job_end_summary(const JobRecord& job);

// The log whose tail a FAILED job's report shows: its failing rank's, else its output.
std::string failure_log_path(const JobRecord& job, const std::string& run_dir);

// The summary line and, for a FAILED job whose log exists, a header naming the log and its
// last lines.
std::string job_end_report(const JobRecord& job, const LogTail& tail);

}  // namespace dlrun::launcher
