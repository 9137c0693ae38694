#pragma once
// The plan: what to run on this machine, as one typed value. PlanOptions is what a front-end
// gives (the CLI's flags of `dlrun local`, a submitted job.toml with its allocation, an
// agent's options from `dlrun run`), each turned into typed values once; make_plan() checks
// it and resolves it against the machine (the program as command_resolution.hpp says, the
// GPUs, a port, the run directory) into the Plan that the Supervisor runs. make_plan() starts
// nothing: every input error is found here, before any rank exists. Glossary:
// docs/architecture.md.

#include <functional>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "dlrun/launcher/prefix_template.hpp"
#include "dlrun/launcher/rank_env.hpp"
#include "dlrun/launcher/gpu_selection.hpp"
#include "dlrun/launcher/exit_status.hpp"
#include "dlrun/launcher/member.hpp"

namespace dlrun::launcher {

enum class ColorMode { automatic, always, never };
// Whether output to `fd` is coloured: `automatic` on a terminal, unless NO_COLOR or TERM=dumb.
bool use_color(ColorMode mode, int fd, const Environment& env);

// Where the options were written, so that an error names a setting as its user wrote it:
// `--gpus 4` on the command line, `gpus` in a job file.
enum class SettingsSource { command_line, job_file };
// "--max-restarts 3" or "the job's max_restarts (3)".
std::string setting_label(SettingsSource source, std::string_view key, std::string_view value);

struct PlanOptions {
  std::optional<int> nproc;         // CPU ranks to start
  std::optional<GpuRequest> gpus;   // one rank per GPU: a count of the visible ones, or these ids
  // GPUs other jobs hold (the job store's): a count takes none of them. A list is the user's.
  std::vector<std::string> gpus_in_use;
  std::string gpus_label;           // names `gpus` in messages ("--gpu-ids 0,2"); empty: --gpus / gpus
  std::optional<int> min_ranks;     // elastic: the fewest ranks the job may run with
  std::optional<int> max_ranks;     // elastic: the most (default: as many as it starts with)
  GpuBinding gpu_binding = GpuBinding::rank;
  std::string master_addr = "127.0.0.1";
  std::optional<int> master_port;   // default: a free port, new for each restart
  std::string run_id;               // TORCHELASTIC_RUN_ID (torchrun's --rdzv_id); default: the job's id
  std::string run_dir;              // default: $DLRUN_HOME/runs/<job id>
  std::string log_dir;              // rank-N.log here; default: the run directory
  // Also RUN_DIR/output.log: every rank's lines with their prefix, in the order they came, and
  // dlrun's own (dlrun local: what `dlrun logs JOB` shows; a submitted job's output is its file).
  bool output_log = false;
  std::string prefix = PrefixTemplate::k_default;
  bool prefix_enabled = true;
  std::optional<std::vector<int>> shown_ranks;  // --ranks: on the terminal; all are logged
  ColorMode color = ColorMode::automatic;
  double grace_seconds = 30;
  int max_restarts = 0;
  int tail_lines = 20;              // stderr lines shown when a rank fails
  bool rank0_stdin = false;         // rank 0 reads dlrun's standard input (stdin_relay.hpp); else /dev/null
  bool relay_terminal = false;      // ...a terminal too (dlrun local --stdin); else a terminal is /dev/null
  bool quiet = false;               // no informational lines from dlrun itself
  bool check_master_port = true;    // false when MASTER_PORT is on another host (agents)
  double watchdog_seconds = 0;      // > 0: a rank without progress that long counts as failed
  double time_limit_seconds = 0;    // > 0: the job is stopped (as a cancel) after running that long
  std::vector<std::string> command; // program and its arguments
  SettingsSource source = SettingsSource::command_line;
};

// How often a job's group was restarted, and why.
struct RestartCounts {
  int all = 0;       // every restart (DLRUN_RESTART_COUNT)
  int failures = 0;  // after a failed rank: these spend max_restarts
  int resizes = 0;   // to change the rank count (dlrun resize, the scheduler): spend nothing
  int requested = 0; // the ranks asked for (all exited 75): spend nothing
};

// How a job's run ended, as its Supervisor tells it.
struct RunEnd {
  int exit_code = 0;                // dlrun's (docs/exit-codes.md)
  int stop_signal = 0;              // the signal that stopped it (SIGINT, SIGTERM, SIGHUP, SIGQUIT), or 0
  std::string summary;              // why it failed or stopped; empty on success
  std::optional<int> failed_rank;   // the rank whose failure ended it, if one did
};

struct Plan {
  PlanOptions options;
  ProgramSpec program;
  int world_size = 0;
  std::vector<std::string> gpu_ids;  // one per rank, or empty
  std::string job_id;
  std::string run_dir;
  std::string log_dir;  // the members' logs: options.log_dir, else run_dir
  // prepare_run_dir() made run_dir: it holds no file of an earlier run (rank error files).
  bool fresh_run_dir = false;
  std::string host;
  Environment base_env;
  int cores = 1;
  // Told each time the group is restarted, with the counts so far (the job store keeps them).
  std::function<void(const RestartCounts& counts)> on_restart;

  // This machine's place in a multi-node job (dlrun agent); the defaults are one node.
  int node_rank = 0;
  int num_nodes = 1;
  int first_rank = 0;
  int global_world_size = 0;  // 0: world_size
  // Restarts of the job before this supervisor's first attempt (an agent of `dlrun run` is
  // started anew for each of the launcher's attempts): added to DLRUN_RESTART_COUNT.
  int restarts_before = 0;
  // The job's restart budget where another process counts the restarts (an agent's launcher):
  // TORCHELASTIC_MAX_RESTARTS. Empty: options.max_restarts.
  std::optional<int> job_max_restarts;
  // How long ranks left running after others ended with 0 are watched for using no CPU before
  // they are said to wait for them (supervisor_waiting.cpp); tests shorten it.
  double waiting_check_seconds = 60;
  // Restarts the ranks ask for over and over wait longer and longer (restart_request_delay);
  // false: not at all (tests).
  bool restart_waits = true;
  // Elastic bounds: the rank count may change within them (dlrun resize, a lost GPU).
  int min_world_size = 0;
  int max_world_size = 0;

  // Makes each attempt's processes. Empty: one process per local rank, see
  // plan_local_members(). `dlrun run` plans one ssh session per host instead.
  std::function<std::vector<Member>(int restart_count)> planner;
  // `dlrun run`: why a member's end means its host is lost, or empty when it does not: it
  // failed before its host's agent joined the job (so no rank ran there), also when it exited
  // with 0 (what ran there was not dlrun's agent), or its ssh session broke while its ranks ran
  // (exit 255 without the agent's word). Such a failure ends the attempt with
  // exit_code::k_unavailable.
  std::function<std::string(size_t member, const ExitStatus& status)> host_lost;
  // What dlrun calls a member in messages ("rank", "host").
  std::string member_noun = "rank";
  // Passes a stop signal (SIGTERM, SIGINT, SIGHUP, SIGQUIT) on to the members; SIGKILL always goes
  // to their process groups. Empty, or false returned: signal their process groups. `dlrun run`
  // sends it over the rendezvous instead, so that remote ranks get it before their ssh ends
  // (false once the hosts failed to join: no rank runs, their ssh sessions are ended).
  std::function<bool(int signal)> deliver_signal;
  // Passes SIGUSR1/SIGUSR2 on (the job goes on). Empty: to each rank's own process, once it
  // handles the signal. `dlrun run` sends it to the hosts' agents, which do that.
  std::function<void(int signal)> pass_signal;
  // Told when a resize starts (true) and when the new group runs (false), with the rank count
  // and GPUs it runs on then.
  std::function<void(bool rescaling, int world_size, const std::vector<std::string>& gpu_ids)> on_rescale;
  // Told once when the job has ended (every rank has exited), before run() returns.
  std::function<void(const RunEnd& end)> on_end;
};

// The ranks of this machine for one attempt: env:// variables, a fresh MASTER_PORT
// unless one was given, the prefix label and log file of each.
std::vector<Member> plan_local_members(const Plan& job, int restart_count);

// Where rank `rank` reports progress for the watchdog (DLRUN_PROGRESS_FILE).
std::string progress_file(const std::string& run_dir, int rank);

// Throws ConfigError for anything wrong in the options or the machine's answer to them.
// `job_id` empty: a new one (make_job_id()).
Plan make_plan(const PlanOptions& options, const Environment& env,
                           const std::string& job_id = {});

// Runs the job to its end and returns dlrun's exit code (docs/exit-codes.md).
int run_plan(const Plan& job);

}  // namespace dlrun::launcher
