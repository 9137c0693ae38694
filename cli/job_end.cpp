#include "job_end.hpp"

#include <fmt/format.h>

#include <ostream>

#include "dlrun/error.hpp"
#include "dlrun/launcher/job_end_report.hpp"
#include "dlrun/launcher/job_logs.hpp"

namespace dlrun::cli {

void print_job_end(launcher::JobQueue& queue, int64_t id, int tail_lines, std::ostream& out) {
  auto job = queue.store().get(id);
  if (!job) throw ConfigError(fmt::format("no job {}", id));
  launcher::LogTail tail;
  if (tail_lines > 0 && job->state == launcher::JobState::failed) {
    tail = launcher::read_log_tail(launcher::failure_log_path(*job, queue.log_dir(*job)), static_cast<size_t>(tail_lines));
  }
  out << launcher::job_end_report(*job, tail) << std::flush;
}

}  // namespace dlrun::cli
