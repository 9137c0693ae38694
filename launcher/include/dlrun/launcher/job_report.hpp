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
#include "dlrun/launcher/queue_insight.hpp"

namespace dlrun::launcher {

// "0:05", "12:34", "1:02:03", "2-03:04:05" (days-hours:minutes:seconds, as squeue).
std::string format_duration(double seconds);

// Columns padded to their widest cell, or to min_widths[column] if wider; the first row is
// the header.
std::string render_table(const std::vector<std::vector<std::string>>& rows, const std::vector<size_t>& min_widths = {});

// Rows for `dlrun status`, header first (docs/jobs.md, "What dlrun status shows").
std::vector<std::vector<std::string>> status_rows(const std::vector<JobRecord>& jobs, double now,
                                                  const QueueInsight& insight = {});
// Those rows as the table prints them, columns wide enough that values changing as jobs run
// do not move the others.
std::string status_table(const std::vector<JobRecord>& jobs, double now, const QueueInsight& insight = {});
// `dlrun status JOB`: key: value lines.
std::string status_details(const JobRecord& job, double now, const QueueInsight& insight = {});
// A PENDING job's `reason` is why it waits (insight.waiting).
std::string job_json(const JobRecord& job, double now, const QueueInsight& insight = {});
// A JSON array of job_json objects, one per line (`dlrun status --json`).
std::string jobs_json(const std::vector<JobRecord>& jobs, double now, const QueueInsight& insight = {});

// Exit code of `dlrun status JOB` for the job's state (docs/exit-codes.md).
int status_exit_code(JobState state);

}  // namespace dlrun::launcher
