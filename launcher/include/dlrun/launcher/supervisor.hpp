#pragma once
// Runs a Plan to its end: starts the worker group, watches it, and applies the
// policy: one failing rank stops the whole group (SIGTERM, then SIGKILL after the grace
// period) and is reported (its stderr's tail, or the exception in its error file,
// error_file.hpp); the group restarts while the job's restart budget lasts; ranks that all exit
// with exit_code::k_restart_me are restarted without spending it; SIGINT, SIGTERM, SIGHUP, SIGQUIT
// are passed on to every rank's process group, a second one kills at once. Elastic jobs
// change their rank count on request (dlrun resize) and leave out a GPU whose rank keeps
// failing; a rank without progress for --watchdog seconds counts as failed
// (supervisor_elastic.cpp). Written as small steps on an Asio io_context (poll_once()),
// not one long loop. The decisions are pure functions (supervisor_policy.hpp); processes
// are started and signalled through a ProcessRunner (member_group.hpp), real by default,
// a fake in the unit tests.
// Owns its io_context and signal handlers; one Supervisor per process; not thread-safe
// (request_stop() excepted).

#include <chrono>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include <boost/asio/io_context.hpp>
#include <boost/asio/signal_set.hpp>
#include <boost/asio/steady_timer.hpp>

#include "dlrun/launcher/error_file.hpp"
#include "dlrun/launcher/plan.hpp"
#include "dlrun/launcher/member_group.hpp"
#include "dlrun/launcher/stdin_relay.hpp"
#include "dlrun/launcher/rank_output.hpp"
#include "dlrun/launcher/resize.hpp"
#include "dlrun/launcher/supervisor_policy.hpp"

namespace dlrun::launcher {

class Supervisor {
 public:
  using RunnerFactory = std::function<std::unique_ptr<ProcessRunner>(boost::asio::io_context&)>;
  // runner empty: the real one (make_process_runner).
  explicit Supervisor(const Plan& job, const RunnerFactory& runner = {});
  ~Supervisor();

  // Runs until the job is over; returns dlrun's exit code. The same as begin(), poll_once()
  // until it says false, end().
  int run();
  // Starts listening and the first attempt.
  void begin();
  // Handles one event; false once the job is over. With max_wait, returns after that long
  // without an event too.
  bool poll_once(std::optional<std::chrono::milliseconds> max_wait = std::nullopt);
  // After the last event: the last group is gone, the runner released.
  void end();
  int exit_code() const { return m_exit_code; }
  // What SIGINT, SIGTERM, SIGHUP and SIGQUIT to dlrun do: pass it on, and kill at the second one.
  void handle_stop_signal(int signal);
  // Standard output's reader has gone (`dlrun local … | head`): the ranks are stopped (SIGTERM,
  // so that a program on the runtime checkpoints), and the job ends as if SIGPIPE stopped it
  // (exit 141), as the ranks of a launcher that hands them its stdout would end.
  void handle_out_reader_gone();
  // What `dlrun resize` asks for. Returns the answer at once ("ok N", "refused: …", "error: …";
  // resize.hpp), or nothing while the resize is under way (the answer comes once the new
  // group runs). Ranks that have not said they handle the stop request (handles_stop()) are
  // resized only with Unannounced::restart: SIGTERM to their process groups instead of the
  // stop request, and a restart at the new size.
  std::optional<std::string> resize(const ResizeRequest& request);
  // Thread-safe: fail the current attempt (stop the group) for a reason found elsewhere,
  // e.g. hosts that never joined the rendezvous. Counts like a failed rank.
  void request_stop(const std::string& reason, int exit_code);
  // The signal that stopped the job (SIGINT, SIGTERM, SIGHUP, SIGQUIT; SIGPIPE when standard
  // output's reader went), or 0.
  int stop_signal() const { return m_stop_signal; }
  // One line on how the job ended ("rank 1 exited with code 7"), empty on success.
  const std::string& summary() const { return m_summary; }
  // The rank whose failure ended the job, if one did (not a stop signal, not a failure
  // found elsewhere such as hosts missing from the rendezvous).
  std::optional<int> failed_rank() const { return m_failed_rank; }

 private:
  // waiting: between attempts, for a restart the ranks asked for (restart_request_delay)
  enum class Phase { running, stopping, draining, waiting, done };
  struct Failure {
    size_t index = 0;
    ExitStatus status{};
    std::string reason{};  // set for request_stop(): no member failed by itself
    std::optional<RankError> error{};  // what the member's error file says (error_file.hpp)
    std::string error_path{};
    bool said = false;  // on the terminal already (at once, or by report_failure)
    // Members that had ended with 0 when this failure came (report_failure names them).
    std::vector<size_t> ended_ok{};
    // Members that failed too, reaped with it (before any was told to stop).
    std::vector<size_t> failed_too{};
    // Set when the member that failed first only lost a peer (its stderr tells of a broken
    // connection) and another showed an error of its own: `index` is then that other, the
    // likelier cause (blame_likelier_cause), and this the one that failed first.
    struct First {
      size_t index = 0;
      ExitStatus status{};
    };
    std::optional<First> first{};
    std::chrono::steady_clock::time_point at{};  // when the member failed (reaped)
    bool cause_stopped = false;  // the likelier cause ended by dlrun's stop signal, after its error
  };

  void start_attempt();
  bool agent_of_a_restart() const;
  void listen_for_signals();
  // Ctrl-Z (SIGTSTP): the ranks stop with dlrun, and go on with it at SIGCONT (fg, bg).
  void listen_for_job_control();
  // supervisor_signals.cpp: SIGUSR1, and a SIGUSR2 that is not `dlrun resize`'s, passed on to
  // the ranks; the job goes on.
  void listen_for_passed_signals();
  void pass_on(int signal);
  void deliver_held_signals();
  void carry_held_signals_over();
  void hand_held_signals_to_new_ranks();
  void drop_held_signals(const std::string& why);
  void on_children_ended();
  void stop_group(int signal);
  void signal_members(int signal);
  void on_grace_expired();
  // SIGKILL to every running member's group; drains at once if only what ended members
  // started was left.
  void kill_members_now();
  // Until what the ended members started has ended too (it got the stop signal), or the grace
  // period ends.
  void wait_for_remnants();
  int remnant_signal() const;
  void begin_drain();
  void finish_attempt();
  void read_error_file_of(Failure& failure) const;
  void blame_likelier_cause(Failure& failure) const;
  // "rank 1 exited with code 1" (and the member that failed first, when it was not the cause;
  // `brief`: for the job's reason in dlrun status).
  std::string failure_headline(const Failure& failure, bool brief = false) const;
  void report_failure();  // m_failure's, in full, at the attempt's end
  void say_failure_once();
  bool all_succeeded() const;
  void record(const std::string& state, std::optional<int> exit_code);
  void finish(int exit_code);
  void flush_terminal();
  // Counts one more restart (of every kind) and tells the plan's on_restart.
  void count_restart();

  // supervisor_elastic.cpp
  void listen_for_resize();
  void on_resize_request();
  void apply_resize();
  bool leave_out_failing_gpu(const Failure& failure);
  void answer_resize(const std::string& answer);
  void arm_watchdog();
  void check_watchdog();
  double watchdog_period() const;  // seconds between checks

  // supervisor_waiting.cpp: ranks left waiting for ranks that ended with 0 (uneven data, a
  // rank that skipped the rendezvous) are said once, as torchrun would hang without a word.
  void watch_waiting_ranks();
  void check_waiting_ranks();

  Plan m_job;  // a copy: an elastic job's rank count and GPUs change
  boost::asio::io_context m_io;
  std::unique_ptr<ProcessRunner> m_runner;
  boost::asio::signal_set m_stop_signals;
  boost::asio::signal_set m_job_control;  // SIGTSTP, SIGCONT
  boost::asio::steady_timer m_stop_self_timer;  // Ctrl-Z: dlrun stops after its ranks
  unsigned m_job_control_seen = 0;              // SIGTSTPs and SIGCONTs handled
  std::optional<std::chrono::steady_clock::time_point> m_resumed_at;  // the last SIGCONT: the watchdog counts from it
  boost::asio::steady_timer m_grace_timer;
  boost::asio::steady_timer m_drain_timer;
  boost::asio::steady_timer m_restart_timer;
  boost::asio::signal_set m_resize_signal;
  boost::asio::signal_set m_passed_signals;
  // A passed-on signal waits for each rank until the rank handles it (its default action would
  // end the rank: a rank still starting, a Python one importing torch, has no handler yet).
  struct HeldSignal {
    int signal = 0;
    std::vector<size_t> members;  // still to get it; all of the next attempt's when next_attempt
    bool next_attempt = false;    // it came between attempts (or before the first)
    std::chrono::steady_clock::time_point since;
    bool said = false;            // the warning that it still waits
  };
  std::vector<HeldSignal> m_held_signals;
  boost::asio::steady_timer m_pass_timer;
  boost::asio::steady_timer m_watchdog_timer;
  boost::asio::steady_timer m_waiting_timer;
  boost::asio::steady_timer m_remnant_timer;  // while what ended ranks started still runs
  boost::asio::steady_timer m_alive_timer;    // touches job.json: when a lost job ended, give or take
  void keep_alive_mark();
  boost::asio::steady_timer m_time_limit_timer;  // job.toml's time_limit: stops the job as a cancel
  void arm_time_limit();
  bool m_waiting_watched = false;  // m_waiting_timer is armed
  bool m_said_waiting = false;     // this attempt's ranks were said to wait
  std::vector<std::optional<double>> m_waiting_cpu;  // each member's CPU seconds when it was armed
  std::optional<ResizeRequest> m_pending_resize;
  bool m_resize_restarts = false;  // the pending resize stops ranks that do not handle the stop request
  bool m_resize_killed = false;    // ranks asked to stop for it had not within the grace period
  bool m_killing = false;          // SIGKILL sent this attempt: what ended ranks started is not waited for
  // Ranks of an earlier attempt said that they handle the stop request: the program does, and
  // ranks that have not said so yet are still starting (a resize then: try again, not refused).
  bool m_program_handles_stop = false;
  int m_output_log = -1;       // RUN_DIR/output.log (PlanOptions::output_log), or -1
  std::string m_stopped_because;  // what stopped the job when no signal did (handle_out_reader_gone)
  std::string m_cancelled_by;  // what cancelled the job ("dlrun cancel", run_dir.hpp), if its SIGTERM said so
  GpuFailures m_gpu_failures;
  // The GPUs this job holds: a `dlrun local` job keeps the ones it started with while it runs
  // on fewer, so it can grow back onto them; a submitted job's are what the queue handed it.
  std::vector<std::string> m_held_gpu_ids;
  std::chrono::steady_clock::time_point m_attempt_started;
  Terminal m_terminal;
  std::unique_ptr<StdinRelay> m_stdin;  // rank 0's standard input (PlanOptions::rank0_stdin), or none
  std::unique_ptr<MemberGroup> m_group;
  Phase m_phase = Phase::running;
  int m_restart_count = 0;     // DLRUN_RESTART_COUNT: every restart
  int m_failures_restarted = 0;  // restarts spent from --max-restarts
  int m_resizes = 0;           // restarts at a new size
  int m_requested_restarts = 0;  // restarts the ranks asked for (exit 75)
  std::optional<Failure> m_failure;
  int m_stop_signal = 0;       // signal that asked dlrun to stop, 0 if none
  std::chrono::steady_clock::time_point m_stop_signal_at;  // when it came
  static constexpr std::chrono::seconds k_same_sigterm{2};  // a SIGTERM again within it: the same request
  static constexpr std::chrono::milliseconds k_same_sigint{100};  // a SIGINT again within it: the same one
  int m_late_signal = 0;       // one that came once the attempt was ending anyway (a failure, all exited)
  bool m_restart_requested = false;
  int m_quick_requests = 0;    // restarts asked for in a row, each soon after its start
  int m_exit_code = 0;
  std::string m_summary;
  std::optional<int> m_failed_rank;
};

}  // namespace dlrun::launcher
