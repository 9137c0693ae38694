#pragma once
// The run directory of a job: where each rank's log (rank-N.log), dlrun's record of the
// job (job.json) and the runtime's files (metrics.jsonl, checkpoints) live. Layout in
// docs/channels.md. Default: $DLRUN_HOME/runs/<job id>, DLRUN_HOME defaulting to
// ${XDG_STATE_HOME:-~/.local/state}/dlrun. Functions are thread-safe.

#include <map>
#include <optional>
#include <string>

#include "dlrun/launcher/rank_env.hpp"

namespace dlrun::launcher {

// A new job id: "<yyyymmdd>-<hhmmss>-<4 hex>" in local time; sortable and unique enough
// for one user's jobs on one machine.
std::string make_job_id();

// DLRUN_HOME from `env`, or its default.
std::string dlrun_home(const Environment& env);
// `path` absolute and lexically normal, without a trailing slash ("a/b/" is "a/b"): how two run
// directories are compared.
std::string plain_path(const std::string& path);

// `requested` if not empty, else $DLRUN_HOME/runs/<job_id>. Creates it (and parents),
// points $DLRUN_HOME/runs/latest at it when it is the default, and otherwise links
// $DLRUN_HOME/runs/<job_id> to it, so that every run can be found by its job id. Throws ConfigError when
// it cannot be created. `created`, when given, says whether it did not exist before.
std::string prepare_run_dir(const std::string& requested, const std::string& job_id,
                            const Environment& env, bool* created = nullptr);

// Where a job's logs go: `requested` if not empty (created, with its parents), else the run
// directory. Throws ConfigError when it cannot be created.
std::string prepare_log_dir(const std::string& requested, const std::string& run_dir);

std::string rank_log_path(const std::string& log_dir, int rank);

// True once the job's current ranks have said that they handle the stop request
// (RUN_DIR/handles-stop, run_files::k_handles_stop: the runtime writes it, any program can;
// the supervisor removes it at each attempt's start): only then may the job be resized
// without losing its progress (docs/elastic.md).
bool handles_stop(const std::string& run_dir);

// A job's whole output, its ranks' lines with their prefix and dlrun's own, in the order they
// came: RUN_DIR/output.log (a submitted job's supervisor writes its output there; dlrun local
// copies its terminal's there, PlanOptions::output_log).
inline constexpr const char* k_output_log = "output.log";

// `dlrun cancel` writes what stops the job (RUN_DIR/cancelled-by: "dlrun cancel") and to
// which supervisor (its pid) before it signals it; that supervisor then says that the job was
// cancelled, not that it got SIGTERM. A note for another pid is an earlier run's (a run
// directory taken up again) and is not read.
void write_cancel_note(const std::string& run_dir, const std::string& what, int supervisor_pid);
std::optional<std::string> cancel_note(const std::string& run_dir, int supervisor_pid);

}  // namespace dlrun::launcher
