#include "dlrun/launcher/job_end_report.hpp"

#include <fmt/format.h>
#include <fmt/ranges.h>

#include "dlrun/launcher/job_report.hpp"
#include "dlrun/launcher/run_dir.hpp"
#include "dlrun/launcher/text.hpp"

namespace dlrun::launcher {
namespace {

// " (1 restart, 2 resizes)": what happened on the way, when anything did.
std::string history(const JobRecord& job, bool with_ranks) {
  std::vector<std::string> parts;
  if (with_ranks && job.allocation.ranks > 0) parts.push_back(counted(job.allocation.ranks, "rank"));
  if (job.restarts > 0) parts.push_back(counted(job.restarts, "restart"));
  if (job.requested_restarts > 0) parts.push_back(counted(job.requested_restarts, "restart") + " the ranks asked for");
  if (job.resizes > 0) parts.push_back(counted(job.resizes, "resize"));
  if (parts.empty()) return {};
  return fmt::format(" ({})", fmt::join(parts, ", "));
}

std::string duration(const JobRecord& job) {
  if (job.started_at <= 0) return "before it started";
  const double seconds = (job.ended_at > 0 ? job.ended_at : job.started_at) - job.started_at;
  return fmt::format("{} {}", job.state == JobState::succeeded ? "in" : "after", format_duration(seconds));
}

}  // namespace

std::string job_end_summary(const JobRecord& job) {
  std::string line = fmt::format("Job {} ({}) {} {}", job.id, job.name, to_string(job.state), duration(job));
  if (job.state == JobState::succeeded) return line + history(job, true);
  if (job.exit_code) line += fmt::format(" with exit code {}", *job.exit_code);
  if (!job.reason.empty()) line += ": " + job.reason;
  return line + history(job, false);
}

std::string failure_log_path(const JobRecord& job, const std::string& run_dir) {
  if (job.failed_rank) return rank_log_path(run_dir, *job.failed_rank);
  return run_dir + "/output.log";
}

std::string job_end_report(const JobRecord& job, const LogTail& tail) {
  std::string text = job_end_summary(job) + "\n";
  if (job.state != JobState::failed || !tail.exists) return text;
  const std::string whose = job.failed_rank ? fmt::format("rank {}'s log", *job.failed_rank) : "the job's output";
  if (tail.lines.empty()) return text + fmt::format("==> {} ({}) is empty <==\n", whose, tail.path);
  text += fmt::format("==> last {} of {} ({}) <==\n", counted(static_cast<long long>(tail.lines.size()), "line"), whose,
                      tail.path);
  for (const auto& line : tail.lines) text += line + "\n";
  return text;
}

}  // namespace dlrun::launcher
