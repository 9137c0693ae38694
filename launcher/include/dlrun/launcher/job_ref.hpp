#pragma once
// How a user names a job on the command line, one value for every verb (status, logs,
// cancel, resize, clean, --resume): its number, given by the job store to every job, submitted
// or run in the foreground (`17`), or its name (the newest job of that name; for the verbs that
// act on a job that runs, the newest that has not ended, if one has not). A time-stamped id
// (`20261123-120000-ab12`) is a run of a dlrun from before every run had a number, or one
// whose store could not be opened: its files are in $DLRUN_HOME/runs/ID. Parsed once, here.

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace dlrun::launcher {

struct JobRef {
  std::string text;               // as the user wrote it
  std::optional<int64_t> number;  // the job's number; empty: a name or a time-stamped id
};

class JobStore;

// Which of several jobs of one name a name means (JobStore::find_by_name).
enum class NamedJob { newest, active_first };

// Throws ConfigError for text that names no job: empty, longer than 128 bytes, or with a
// character no id has (ids are letters, digits, '-', '_' and '.', never a path: "..", "/").
JobRef parse_job_ref(std::string_view text);

// What makes `name` one no verb could name a job by, nullopt when it is fine: not an id's
// characters (letters, digits, '-', '_', '.'), '.' or '-' first (a path, an option), over
// 128 bytes, or all digits (a number). Said after the name itself, e.g. "'my job': a name is …".
std::optional<std::string> job_name_problem(std::string_view name);

// A name job_name_problem accepts, made from a program's name: other characters become '_',
// so does a leading '-' or '.', it is cut at 128 bytes, and a number gets "job-" before it
// ("my train.sh" -> "my_train.sh", "123" -> "job-123", "" -> "job").
std::string job_name_from(std::string_view program_name);

// A job's name when none is given: its program's (train.py, not the python3 that runs it; the
// module of python3 -m pkg.train), as job_name_from makes it. "job" for no command.
std::string default_job_name(const std::vector<std::string>& command);

// Throws ConfigError for a `--name` job_name_problem finds fault with.
void check_job_name(std::string_view name);

// The job's number: its own, or that of the job of that name `which` picks. ConfigError when no
// job has that name, saying where an unnumbered run's files are when `job` is a time-stamped id.
int64_t job_number(JobStore& store, const JobRef& job, std::string_view verb, NamedJob which = NamedJob::newest);

}  // namespace dlrun::launcher
