#pragma once
// RUN_DIR/job.json: the record a supervisor keeps of its job while it runs and after it
// ended, for `dlrun resize`, `dlrun status` and scripts (layout in docs/channels.md). The
// supervisor writes it atomically (temporary file, rename) at every change of state, so a
// reader never sees half of it. Functions are thread-safe.

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

namespace dlrun::launcher {

struct RunRecord {
  std::string id;     // the job id ("20261123-120000-ab12" for dlrun local)
  std::string state;  // running, rescaling, succeeded, failed, cancelled
  int world_size = 0;
  int restarts = 0;
  int64_t dlrun_pid = 0;  // the supervisor's pid
  std::string run_dir;
  std::string updated_at;  // ISO 8601, UTC
  std::vector<std::string> command;
  std::optional<int> exit_code;  // once the job has ended
  std::string reason;               // once it has ended other than well: why ("rank 1 exited with code 7")
  std::optional<int> failed_rank;   // the rank that failed, where one did
};

// Throws SystemError when the file cannot be written.
void write_run_record(const std::string& run_dir, const RunRecord& record);
// Nothing when RUN_DIR/job.json does not exist or is not a run record.
std::optional<RunRecord> read_run_record(const std::string& run_dir);

}  // namespace dlrun::launcher
