#include "dlrun/launcher/job_ref.hpp"

#include <algorithm>
#include <cctype>

#include <fmt/format.h>

#include "dlrun/error.hpp"
#include "dlrun/launcher/text.hpp"

namespace dlrun::launcher {

JobRef parse_job_ref(std::string_view text) {
  constexpr size_t k_max_length = 128;
  if (text.empty()) throw ConfigError("a job id is empty (dlrun status lists the jobs)");
  if (text.size() > k_max_length) {
    throw ConfigError(fmt::format("'{}…': not a job id (longer than {} bytes)", text.substr(0, 32), k_max_length));
  }
  auto allowed = [](char c) { return std::isalnum(static_cast<unsigned char>(c)) || c == '-' || c == '_' || c == '.'; };
  if (!std::all_of(text.begin(), text.end(), allowed) || text.find("..") != std::string_view::npos ||
      text.front() == '.') {
    throw ConfigError(fmt::format("'{}': not a job id (a number such as 17, or the id dlrun local printed, "
                                  "such as 20261123-120000-ab12)",
                                  text));
  }
  JobRef job{std::string(text), std::nullopt};
  if (std::all_of(text.begin(), text.end(), [](char c) { return c >= '0' && c <= '9'; })) {
    auto number = parse_int(text);
    if (!number) throw ConfigError(fmt::format("no job {} (dlrun status --all lists every job)", text));
    job.number = *number;
  }
  return job;
}

int64_t submitted_job_number(const JobRef& job, std::string_view verb) {
  if (job.number) return *job.number;
  throw ConfigError(fmt::format("job {}: dlrun {} knows submitted jobs (numbered, as dlrun status lists them); "
                                "this is a dlrun local or dlrun run job, whose output is in $DLRUN_HOME/runs/{}",
                                job.text, verb, job.text));
}

}  // namespace dlrun::launcher
