#pragma once
// How a user names a job on the command line, one value for every verb (status, logs,
// cancel, resize): a submitted job's number, given by the job store (`17`), or the id a
// `dlrun local` or `dlrun run` job printed (`20261123-120000-ab12`), which names its run
// directory under $DLRUN_HOME/runs. Parsed once, here: a verb never guesses what it got.

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>

namespace dlrun::launcher {

struct JobRef {
  std::string text;               // as the user wrote it
  std::optional<int64_t> number;  // a submitted job's; empty: a run's id
};

// Throws ConfigError for text that names no job: empty, longer than 128 bytes, or with a
// character no id has (ids are letters, digits, '-', '_' and '.', never a path: "..", "/").
JobRef parse_job_ref(std::string_view text);

// The submitted job's number; ConfigError for a run's id where `verb` knows submitted jobs
// only, saying so.
int64_t submitted_job_number(const JobRef& job, std::string_view verb);

}  // namespace dlrun::launcher
