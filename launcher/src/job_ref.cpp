#include "dlrun/launcher/job_ref.hpp"

#include <filesystem>

#include "dlrun/launcher/command_resolution.hpp"

#include <fmt/format.h>
#include <fmt/ranges.h>

#include <algorithm>
#include <cctype>
#include <string>
#include <vector>

#include "dlrun/error.hpp"
#include "dlrun/launcher/job_store.hpp"
#include "dlrun/launcher/text.hpp"
#include "dlrun/log.hpp"

namespace dlrun::launcher {

JobRef parse_job_ref(std::string_view text) {
  constexpr size_t k_max_length = 128;
  if (text.empty()) throw ConfigError("a job id is empty (dlrun status lists the jobs)");
  if (text.size() > k_max_length) {
    throw ConfigError(fmt::format("'{}…': not a job id (longer than {} bytes)", text.substr(0, 32),
                                  k_max_length));
  }
  auto allowed = [](char c) {
    return std::isalnum(static_cast<unsigned char>(c)) || c == '-' || c == '_' || c == '.';
  };
  if (!std::all_of(text.begin(), text.end(), allowed) ||
      text.find("..") != std::string_view::npos || text.front() == '.') {
    throw ConfigError(
        fmt::format("'{}': not a job id (a job's number such as 17, or its name: dlrun "
                    "status lists them)",
                    text));
  }
  JobRef job{std::string(text), std::nullopt};
  if (std::all_of(text.begin(), text.end(), [](char c) { return c >= '0' && c <= '9'; })) {
    auto number = parse_int(text);
    if (!number)
      throw ConfigError(fmt::format("no job {} (dlrun status --all lists every job)", text));
    job.number = *number;
  }
  return job;
}

std::optional<std::string> job_name_problem(std::string_view name) {
  std::optional<JobRef> ref;
  if (name.empty() || name.front() != '-') {  // `dlrun logs -x` would read an option
    try {
      ref = parse_job_ref(name);
    } catch (const ConfigError&) {
    }
  }
  if (!ref) {
    return fmt::format("'{}': a name is letters, digits, '-', '_' and '.' ('-' and '.' not first, no '..'), at "
                       "most 128 bytes, so that every verb can name the job by it",
                       name);
  }
  if (ref->number) return fmt::format("{}: a number is a job's number; add a letter", name);
  return std::nullopt;
}

std::string job_name_from(std::string_view program_name) {
  std::string name(program_name.substr(0, 128));
  for (size_t i = 0; i < name.size(); ++i) {
    const auto c = static_cast<unsigned char>(name[i]);
    const bool allowed = std::isalnum(c) || ((c == '-' || c == '.') && i > 0) || c == '_';
    if (!allowed || (c == '.' && name[i - 1] == '.')) name[i] = '_';
  }
  if (name.empty()) return "job";
  if (!job_name_problem(name)) return name;
  return ("job-" + name).substr(0, 128);  // all digits
}

void check_job_name(std::string_view name) {
  if (auto problem = job_name_problem(name)) throw ConfigError("--name " + *problem);
}

int64_t job_number(JobStore& store, const JobRef& job, std::string_view verb, NamedJob which) {
  if (job.number) return *job.number;
  if (auto named = store.find_by_name(job.text, which)) {
    if (which == NamedJob::active_first && !is_terminal(named->state)) {
      // Two jobs of one name that run (a job file submitted twice): the name means the newest,
      // which is said, with the others.
      std::vector<std::string> others;
      for (const auto& record : store.list(false, 0)) {
        if (record.name == job.text && record.id != named->id && !is_terminal(record.state)) {
          others.push_back(std::to_string(record.id));
        }
      }
      if (!others.empty()) {
        log::info("'{}' is job {}, the newest of the jobs of that name that have not ended (also {}: say which by "
                  "number)",
                  job.text, named->id, fmt::format("{}", fmt::join(others, ", ")));
      }
    }
    return named->id;
  }
  if (job.text == "latest") {
    // As $DLRUN_HOME/runs/latest (no job of that name).
    if (const auto newest = store.newest_of_mine()) return *newest;
    throw ConfigError("'latest': you have no job yet (dlrun status --all lists every job)");
  }
  if (job.text.size() == 20 && job.text[8] == '-' && job.text[15] == '-') {
    throw ConfigError(fmt::format(
        "job {}: a run without a job number (from an older dlrun, or one whose job store "
        "could not be opened): dlrun {} does not know it; its files are in "
        "$DLRUN_HOME/runs/{}",
        job.text, verb, job.text));
  }
  throw ConfigError(
      fmt::format("no job numbered or named '{}' (dlrun status --all lists every job)", job.text));
}

std::string default_job_name(const std::vector<std::string>& command) {
  if (command.empty()) return "job";
  const ShownProgram program = shown_program(command);
  return job_name_from(program.module ? program.word : std::filesystem::path(program.word).filename().string());
}

}  // namespace dlrun::launcher
