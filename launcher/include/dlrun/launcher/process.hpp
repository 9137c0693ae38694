#pragma once
// Starting one rank process: clone (sharing dlrun's memory until exec, as vfork and
// posix_spawn do) and exec, with its own process group (so that signals
// reach its children too), a parent-death signal (so that it dies with dlrun), stdin from
// /dev/null and stdout/stderr into pipes that dlrun reads. Errors in exec (not found,
// permission) come back through a close-on-exec pipe, so they are reported by dlrun and
// not printed by a half-started child. Functions here are not thread-safe: dlrun starts
// ranks from its single supervising thread.

#include <signal.h>
#include <sys/types.h>

#include <chrono>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "dlrun/launcher/exit_status.hpp"
#include "dlrun/launcher/rank_env.hpp"

namespace dlrun::launcher {

struct SpawnRequest {
  std::string path;               // resolved program path, see resolve_program()
  std::vector<std::string> argv;  // argv[0] included
  Environment env;
  std::string working_dir;        // empty: inherit
  // Given: stdin is a pipe that starts with this text and stays open until the caller
  // closes SpawnedProcess::stdin_fd (the child sees EOF then). Absent: /dev/null.
  std::optional<std::string> stdin_text;
  // Without stdin_text: an fd of the caller's that the child gets as its stdin (dup'ed; the
  // caller keeps its own), e.g. rank 0's (stdin_relay.hpp). -1: /dev/null.
  int stdin_from = -1;
};

struct SpawnedProcess {
  pid_t pid = -1;  // also the process group id
  int stdout_fd = -1;
  int stderr_fd = -1;
  int exec_status_fd = -1;  // see await_exec()
  int stdin_fd = -1;        // write end of the stdin pipe, with SpawnRequest::stdin_text
};

SpawnedProcess spawn_process(const SpawnRequest& request);

// Waits until the child has exec'd (or failed to) and closes exec_status_fd. Throws
// SpawnError with the errno the child saw. Call after spawning a whole group, so that
// the group's execs overlap.
void await_exec(SpawnedProcess& process, const std::string& program);

// Finds `name` the way execvp would (PATH when it has no '/'). Throws ConfigError
// when it is missing or not executable, naming it.
std::string resolve_program(const std::string& name, const std::string& path_env);

// Runs a short command to its end and returns what it printed; killed after the timeout
// (then its status says SIGKILL).
struct CommandResult {
  ExitStatus status;
  std::string out;
  std::string err;
};
CommandResult run_and_capture(const std::string& path, const std::vector<std::string>& argv, const Environment& env,
                              double timeout_seconds);

// Reaps `pid` once it exits; nullopt if it is still running at `deadline`.
std::optional<int> wait_for_exit(pid_t pid, std::chrono::steady_clock::time_point deadline);

Environment current_environment();

// Cores this process may run on (its CPU affinity), at least 1.
int usable_cores();

// SIGUSR1 and SIGUSR2: what a Supervisor passes on to the ranks and goes on (SIGUSR2 is also
// `dlrun resize`'s request, signals::k_resize_request). Blocked until a Supervisor listens.
sigset_t passed_signal_set();

// Blocks passed_signal_set() in this thread until a Supervisor listens for it.
void block_passed_signals();

// Whether a /proc/PID/status text says the process catches or ignores `signal` (its SigCgt or
// SigIgn mask): then sending it does not end the process by the signal's default action.
bool status_handles_signal(std::string_view status, int signal);
// The same of process `pid`, read now; false when it cannot be read (it has ended).
bool process_handles_signal(pid_t pid, int signal);

// SIGINT, SIGTERM, SIGHUP and SIGQUIT: what asks a dlrun process to stop (blocked until its handlers
// exist, then waited for or handled). SIGHUP only when dlrun was not started with it ignored:
// under `nohup` (or a shell's disown -h) a hang-up of the terminal is nothing to dlrun, as it is
// to any program run so (it stopped the job, and ranks lost their steps since a checkpoint).
sigset_t stop_signal_set();
// The stop signals above, in order (SIGHUP left out under nohup).
std::vector<int> stop_signals();
// Whether dlrun was started with SIGHUP ignored (read before main, before any handler).
bool hangup_ignored();
// Whether a stop signal is pending (blocked, and sent meanwhile); it stays pending.
bool stop_signal_pending();
// A stop signal that is pending (blocked, and sent meanwhile), taken: it will not be delivered
// again. 0 when none is.
int take_pending_stop_signal();

// Raises the soft open-file limit to the hard limit: each rank costs dlrun three fds.
void raise_fd_limit();

}  // namespace dlrun::launcher
