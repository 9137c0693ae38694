#pragma once
// Retention: run directories (logs, checkpoints) of jobs that ended long ago are removed, so
// that they do not pile up under $DLRUN_HOME (docs/jobs.md, "Retention"). Removed: the run
// directory of every job that ended more than `days` days ago, except the `keep` jobs that
// ended last, and the time-stamped run directories an older dlrun left in $DLRUN_HOME/runs
// that long unchanged. Only directories dlrun made under $DLRUN_HOME are removed: a run
// directory given with --run-dir elsewhere loses only its link in $DLRUN_HOME/runs; one that
// a job not to be cleaned uses too is kept. The job's record stays (dlrun status --all).
// `dlrun clean` runs it by hand; a job's end starts it in the background at most once a day.
// Settings: [retention] in $DLRUN_HOME/config.toml; a bad value is a ConfigError naming the
// file, line and key.

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

namespace dlrun::launcher {

class JobQueue;

struct RetentionSettings {
  double days = 14;  // 0: never remove by age
  int keep = 20;     // the newest ended jobs' directories always stay
};

RetentionSettings parse_retention_settings(std::string_view text, const std::string& path);
// $HOME_DIR/config.toml's [retention], or the defaults.
RetentionSettings read_retention_settings(const std::string& home_dir);

// What a clean removed (or, dry, would remove).
struct CleanReport {
  std::vector<int64_t> jobs;       // jobs whose run directory went
  std::vector<std::string> paths;  // directories and links removed
  size_t links = 0;                // of them, links (in $DLRUN_HOME/runs to a --run-dir elsewhere)
  uint64_t bytes = 0;
  // Run directories of chosen jobs that stay, and why ("job 16 uses it: …").
  std::vector<std::pair<std::string, std::string>> kept;
};

// `only`: these ended jobs whatever their age (dlrun clean JOB…); empty: by the settings.
// Throws ConfigError for a job in `only` that does not exist or has not ended.
CleanReport clean_run_dirs(JobQueue& queue, const RetentionSettings& settings, double now,
                           const std::vector<int64_t>& only, bool dry_run);

// Whether the automatic clean is due: at most once a day ($DLRUN_HOME/.last-clean's time),
// a stat() only; a home without that file gets it, and its first clean a day later.
bool retention_due(const std::string& home_dir);
// Marks it done now (before starting it, so that two ends at once start one).
void mark_retention_started(const std::string& home_dir);

}  // namespace dlrun::launcher
