#pragma once
// The Supervisor's decisions, as pure functions of what it knows: what to do when an
// attempt is over, and when to leave a GPU out. No I/O, no processes, no clocks: unit tests
// call them directly, and supervisor_test.cpp checks that the Supervisor acts on them.

#include <chrono>
#include <optional>
#include <string>

namespace dlrun::launcher {

// What is known once every member of an attempt has ended and its output is drained.
struct AttemptEnd {
  int stop_signal = 0;              // a stop signal (SIGINT, SIGTERM, SIGHUP, SIGQUIT) ended the job
  int late_signal = 0;              // a stop signal that came once the attempt was ending anyway (a
                                    // failure stopping the group, or every member exited)
  bool resize_pending = false;      // the attempt was stopped for a resize
  bool restart_requested = false;   // a member exited with exit_code::k_restart_me
  std::optional<int> failure_code;  // the shell code of the attempt's (first) failure
  bool all_succeeded = false;       // every member exited 0
  int failures_restarted = 0;       // restarts spent from the budget so far, over the whole job
  int max_restarts = 0;             // the job's budget (--max-restarts)
};

enum class NextStep {
  finish,                  // the job is over: exit with Decision::exit_code
  finished_before_resize,  // the ranks finished their work before the resize could stop them
  resize,                  // start the group again at the requested size
  restart_after_failure,   // start again, spending one restart of the budget
  restart_on_request,      // start again (the ranks asked for it): the budget is not spent
};

struct Decision {
  NextStep step = NextStep::finish;
  int exit_code = 0;  // with finish: dlrun's exit code (docs/exit-codes.md)
  bool budget_spent = false;  // with finish after a failure: because no restart was left
  bool stopped = false;       // with finish: a stop signal ended the job (it is cancelled)
};

// A stop signal ends the job (128 + signal) whatever else happened; a resize goes before a
// failure; a failure restarts while the budget lasts, else ends the job with its code; a
// restart request (exit 75) restarts without spending the budget. A late signal (one that came
// when a failure or the members' own exits were ending the attempt anyway) lets nothing start
// again: the job ends with the failure's code, or 0 when every member succeeded, else as stopped.
Decision decide_after_attempt(const AttemptEnd& end);

// Ranks that ask to be restarted (exit 75) again and again right after their start would
// restart hundreds of times a second. An attempt that ended so within k_quick_attempt of its
// start counts as quick; after `quick_in_a_row` such restarts in a row the next start waits:
// not at all for the first three, then 1, 2, 4 … s, at most 30 s. A longer attempt starts the
// count again.
inline constexpr std::chrono::seconds k_quick_attempt{10};
// Whether so many quick restarts in a row end the job as failed instead: the tenth (about a
// minute of them, with the waits).
bool restart_requests_loop(int quick_in_a_row);
std::chrono::milliseconds restart_request_delay(int quick_in_a_row);

// Ranks left running after another ended with 0 are looked at every Plan::waiting_check_seconds:
// a rank that used at most 2% of one core over it waits (a collective, the rendezvous) rather
// than works (an evaluation rank 0 does alone).
bool waits_idle(double cpu_seconds_used, double over_seconds);

// Consecutive failures of the rank on one GPU. A GPU is left out once its rank has failed
// k_failures_to_leave_out times in a row, and only while the job stays at its minimum size
// or above.
struct GpuFailures {
  static constexpr int k_failures_to_leave_out = 2;
  std::string last_gpu;
  int in_a_row = 0;

  // Counts a failure of the rank on `gpu`; true when that GPU is to be left out now (the
  // count starts again then).
  bool count(const std::string& gpu, int world_size, int min_world_size);
};

}  // namespace dlrun::launcher
