#pragma once
// How jobs are shown by `dlrun status`: durations, aligned tables, JSON, with the training
// metrics of each job (job_metrics.hpp: a running job's from its RUN_DIR/metrics.jsonl, read
// here; an ended job's as the store kept them). Thread-safe.

#include <map>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "dlrun/launcher/job_metrics.hpp"
#include "dlrun/launcher/job_store.hpp"
#include "dlrun/launcher/policy_view.hpp"

namespace dlrun::launcher {

// "0:05", "12:34", "1:02:03", "2-03:04:05" (days-hours:minutes:seconds, as squeue).
std::string format_duration(double seconds);

// Columns padded to their widest cell; the first row is the header.
std::string render_table(const std::vector<std::vector<std::string>>& rows);

// What the goodput policy would give each GPU job (policy_view.hpp), by id; a job not in it
// shows "-" (or null).
using PolicyViews = std::map<int64_t, PolicyView>;

// Rows for `dlrun status`, header first.
std::vector<std::vector<std::string>> status_rows(const std::vector<JobRecord>& jobs, double now,
                                                  const PolicyViews& policy = {});
// `dlrun status JOB`: key: value lines.
std::string status_details(const JobRecord& job, double now, const PolicyViews& policy = {});
std::string job_json(const JobRecord& job, double now, const PolicyViews& policy = {});
// A JSON array of job_json objects, one per line (`dlrun status --json`).
std::string jobs_json(const std::vector<JobRecord>& jobs, double now, const PolicyViews& policy = {});

// Exit code of `dlrun status JOB` for the job's state (docs/exit-codes.md).
int status_exit_code(JobState state);

}  // namespace dlrun::launcher
