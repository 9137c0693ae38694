#include "dlrun/launcher/supervisor.hpp"

#include <fcntl.h>
#include <sys/stat.h>
#include <signal.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cstring>
#include <functional>
#include <ctime>
#include <filesystem>
#include <thread>
#include <vector>

#include <boost/asio/post.hpp>
#include <fmt/format.h>

#include "dlrun/error.hpp"
#include "dlrun/launcher/command_resolution.hpp"
#include "dlrun/launcher/failure_hints.hpp"
#include "dlrun/launcher/free_port.hpp"
#include "dlrun/log.hpp"
#include "dlrun/launcher/process.hpp"
#include "dlrun/launcher/run_dir.hpp"
#include "dlrun/launcher/run_record.hpp"
#include "dlrun/launcher/text.hpp"
#include "dlrun/launcher/fd_io.hpp"
#include "dlrun/launcher/time_stamp.hpp"
#include "dlrun/protocol.hpp"

namespace dlrun::launcher {

namespace asio = boost::asio;
using namespace std::chrono_literals;

namespace {

constexpr auto k_drain_timeout = 2s;  // output still held by a rank's escaped children
// A rank's error written this close to another rank's failure is part of it (blame_likelier_cause).
constexpr auto k_same_failure = 10s;
constexpr auto k_failed_together = 20ms;  // a rank ending this soon after a failure failed too

// A traceback from a rank's error file is shown whole up to this many lines (its end beyond).
constexpr size_t k_max_traceback_lines = 100;

// The member's TORCHELASTIC_ERROR_FILE, or null (the ssh sessions of dlrun run have none).
const std::string* error_file_of(const Member& member) {
  auto it = member.spec.env.find(env::k_torchelastic_error_file);
  return it == member.spec.env.end() ? nullptr : &it->second;
}

std::string_view first_line(std::string_view text) { return text.substr(0, text.find('\n')); }

// "the rank" or "all 4 ranks": whom a restart starts again.
std::string all_of(size_t count, const std::string& noun) {
  return count == 1 ? "the " + noun : fmt::format("all {} {}s", count, noun);
}

// A terminal that redraws a progress line in place ("\r\x1b[K").
bool live_terminal(int fd, const Environment& env) {
  if (auto it = env.find("TERM"); it != env.end() && it->second == "dumb") return false;
  return ::isatty(fd) == 1;
}

}  // namespace

Supervisor::Supervisor(const Plan& job, const RunnerFactory& runner)
    : m_job(job),
      m_runner(runner ? runner(m_io) : make_process_runner(m_io)),
      m_stop_signals(m_io, SIGINT, SIGTERM, SIGQUIT),
      m_job_control(m_io, SIGTSTP, SIGCONT),
      m_stop_self_timer(m_io),
      m_grace_timer(m_io),
      m_drain_timer(m_io),
      m_restart_timer(m_io),
      m_resize_signal(m_io, signals::k_resize_request),
      m_passed_signals(m_io, SIGUSR1),
      m_pass_timer(m_io),
      m_watchdog_timer(m_io),
      m_waiting_timer(m_io),
      m_remnant_timer(m_io),
      m_alive_timer(m_io),
      m_time_limit_timer(m_io),
      m_held_gpu_ids(job.gpu_ids) {
  if (!hangup_ignored()) m_stop_signals.add(SIGHUP);  // under nohup, ignored as nohup asks
  m_terminal.set_live(Stream::out, live_terminal(STDOUT_FILENO, m_job.base_env));
  m_terminal.set_live(Stream::err, live_terminal(STDERR_FILENO, m_job.base_env));
  // Tells the ranks that their progress bars reach a terminal although their stderr is a pipe.
  if (m_terminal.live(Stream::err)) m_job.base_env.try_emplace(env::k_tty, "1");
  if (m_job.options.rank0_stdin && !m_job.planner) m_stdin = std::make_unique<StdinRelay>(m_job.options.relay_terminal);
  m_terminal.on_out_reader_gone([this] { asio::post(m_io, [this] { handle_out_reader_gone(); }); });
}

void Supervisor::flush_terminal() {
  // A reader that does not read (a full `less`, a terminal stopped with Ctrl-S) has what is left
  // written as it reads, unless a stop signal says not to wait: one that came now, or the one
  // that stopped the job, which then waits as long as for the ranks' last output (all of it is
  // in their logs).
  if (m_terminal.flush(std::chrono::milliseconds(0))) return m_terminal.stop_background();
  const auto deadline = m_stop_signal || m_late_signal ? std::chrono::steady_clock::now() + k_drain_timeout
                                                       : std::chrono::steady_clock::time_point::max();
  auto stopped = std::make_shared<bool>(false);
  m_stop_signals.async_wait([stopped](const boost::system::error_code& ec, int) { *stopped = !ec; });
  bool flushed = false;
  while (!*stopped && !(flushed = m_terminal.flush(std::chrono::milliseconds(50))) &&
         std::chrono::steady_clock::now() < deadline) {
    m_io.poll();
  }
  m_stop_signals.cancel();
  m_io.poll();
  if (!flushed) m_terminal.abandon();
  m_terminal.stop_background();
}

Supervisor::~Supervisor() {
  if (m_output_log < 0) return;
  // What is queued for it goes out first (the terminal's thread writes it): after an exception
  // end() did not wait for it.
  m_terminal.flush(std::chrono::seconds(2));
  m_terminal.set_copy(-1);
  log::set_copy(-1);
  ::close(m_output_log);
}

int Supervisor::run() {
  begin();
  while (poll_once()) {
  }
  end();
  return m_exit_code;
}

void Supervisor::begin() {
  if (m_job.options.output_log && !m_job.run_dir.empty()) {
    // Opened before the runner's begin, whose orphan guard is a fork: close-on-exec keeps it
    // from the ranks.
    m_output_log = ::open((m_job.run_dir + "/" + k_output_log).c_str(), O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC, 0644);
    if (m_output_log >= 0) {
      // An earlier run's (--resume, a run directory given again); not a `dlrun run` host's
      // agent started again for the job's next attempt.
      if (!agent_of_a_restart() && ::lseek(m_output_log, 0, SEEK_END) > 0) {
        write_all(m_output_log, fmt::format("==> dlrun: job {} starts here, {} <==\n", m_job.job_id,
                                            utc_iso8601(std::time(nullptr))));
      }
      m_terminal.set_copy(m_output_log);
      log::set_copy(m_output_log);
    }
  }
  m_runner->begin([this] { on_children_ended(); });
  // After the runner's begin: its orphan guard is a fork, which a second thread must not precede.
  m_terminal.write_in_background();
  listen_for_signals();
  listen_for_job_control();
  listen_for_resize();
  // A job runner blocks these until the handlers above exist; let them through now.
  listen_for_passed_signals();
  sigset_t stop = stop_signal_set();
  const sigset_t passed = passed_signal_set();
  sigorset(&stop, &stop, &passed);
  ::sigprocmask(SIG_UNBLOCK, &stop, nullptr);
  record("running", std::nullopt);
  keep_alive_mark();
  arm_time_limit();
  if (!m_job.options.quiet && m_job.global_world_size == 0) {  // agents: the launcher said it
    // The program as the user named it: train.py, not the python3 that runs it; python3 -m pkg.
    const auto& command = m_job.options.command.empty() ? m_job.program.argv : m_job.options.command;
    const ShownProgram shown = shown_program(command);
    const std::string program = shown.module ? fmt::format("{} -m {}", shown.interpreter, shown.word) : shown.word;
    log::info("job {}: {} rank{} of {}, logs in {}", m_job.job_id, m_job.world_size,
              m_job.world_size == 1 ? "" : "s", program,
              m_job.log_dir.empty() ? m_job.run_dir : m_job.log_dir);
  }
  start_attempt();
}

bool Supervisor::poll_once(std::optional<std::chrono::milliseconds> max_wait) {
  if (m_phase == Phase::done) return false;
  if (max_wait) {
    m_io.run_one_for(*max_wait);
  } else {
    m_io.run_one();
  }
  return m_phase != Phase::done;
}

void Supervisor::end() {
  m_group.reset();
  m_runner->end();
  flush_terminal();
}

void Supervisor::start_attempt() {
  const auto& options = m_job.options;
  auto members = m_job.planner ? m_job.planner(m_restart_count) : plan_local_members(m_job, m_restart_count);
  if (m_stdin) {
    const int fd = m_stdin->for_attempt();
    for (auto& member : members) {
      if (member.spec.rank == 0) member.stdin_from = fd;
    }
  }
  PrefixTemplate prefix(options.prefix);
  const bool color_out = use_color(options.color, STDOUT_FILENO, m_job.base_env);
  const bool color_err = use_color(options.color, STDERR_FILENO, m_job.base_env);
  const size_t shown_count = options.shown_ranks ? options.shown_ranks->size() : members.size();
  auto make_output = [&](const Member& member) {
    RankOutput::Options out;
    out.copy_prefix = prefix.render(member.label);  // output.log's lines say their rank, --no-prefix or not
    if (options.prefix_enabled) {
      std::string text = prefix.render(member.label);
      out.out_prefix = color_out ? colorize_prefix(text, member.spec.rank) : text;
      out.err_prefix = color_err ? colorize_prefix(text, member.spec.rank) : text;
    }
    if (options.shown_ranks) {
      const auto& shown = *options.shown_ranks;
      out.shown = std::find(shown.begin(), shown.end(), member.spec.rank) != shown.end();
    }
    out.tail_lines = static_cast<size_t>(std::max(0, options.tail_lines));
    out.log_name = member.log_path;
    // A prompt (pdb's "(Pdb) ", input("…")) waits on the terminal without a newline.
    out.show_unfinished = member.stdin_from >= 0 && m_stdin && m_stdin->relays_terminal();
    if (out.show_unfinished) out.input_given = m_stdin->given();
    out.join_cut_lines = !options.prefix_enabled && shown_count == 1;
    int fd = -1;
    if (!member.log_path.empty()) {
      fd = ::open(member.log_path.c_str(), O_RDWR | O_CREAT | O_APPEND | O_CLOEXEC, 0644);
      if (fd < 0) log::warn("cannot open {}: {}; {} is not logged", member.log_path, std::strerror(errno), member.name);
    }
    // Where this attempt starts, numbered as DLRUN_RESTART_COUNT is: a restart; or, in a log that
    // holds an earlier run's lines (--resume, a run directory given again), this run.
    const bool agent_restart = agent_of_a_restart();
    const bool appended = fd >= 0 && m_restart_count == 0 && !agent_restart && ::lseek(fd, 0, SEEK_END) > 0;
    auto output = std::make_unique<RankOutput>(std::move(out), fd, m_terminal);
    if (appended) {
      output->note_in_log(
          fmt::format("==> dlrun: job {} starts here, {} <==", m_job.job_id, utc_iso8601(std::time(nullptr))));
    }
    if (m_restart_count > 0 || agent_restart) {
      output->note_in_log(fmt::format("==> dlrun: restart {} <==", m_job.restarts_before + m_restart_count));
    }
    return output;
  };

  carry_held_signals_over();  // their rank numbers are of the group that ends here
  m_waiting_timer.cancel();
  m_waiting_watched = false;
  m_said_waiting = false;
  m_group.reset();
  m_phase = Phase::running;
  m_terminal.set_hold_back(true);
  m_failure.reset();
  m_restart_requested = false;
  // The new ranks say again that they handle the stop request, once they are past their
  // start (a stop request before their handler exists would end them): until then the
  // scheduler does not resize the job (docs/scheduling.md).
  std::error_code ignored;
  m_program_handles_stop = m_program_handles_stop || handles_stop(m_job.run_dir);
  std::filesystem::remove(m_job.run_dir + "/" + run_files::k_handles_stop, ignored);
  // An error file left by an earlier attempt (or run, in a run directory given again) would
  // be taken for this one's. A new run directory holds none: nothing to do at a job's start.
  if (m_restart_count > 0 || !m_job.fresh_run_dir) {
    for (const Member& member : members) {
      if (const std::string* path = error_file_of(member)) ::unlink(path->c_str());
    }
  }
  if (m_job.options.watchdog_seconds > 0) {
    // Before the ranks start: a rank may touch its DLRUN_PROGRESS_FILE at once.
    std::filesystem::create_directories(m_job.run_dir + "/progress", ignored);
  }
  m_group = m_runner->start(members, make_output);
  if (m_stdin) m_stdin->started();
  m_attempt_started = std::chrono::steady_clock::now();
  arm_watchdog();
  hand_held_signals_to_new_ranks();
  // A child may have ended before the SIGCHLD listener saw it: look once now.
  asio::post(m_io, [this] { on_children_ended(); });
}

void Supervisor::listen_for_job_control() {
  m_job_control.async_wait([this](const boost::system::error_code& ec, int signal) {
    if (ec) return;
    const unsigned seen = ++m_job_control_seen;
    if (signal == SIGTSTP) {
      // The ranks lead process groups of their own, which the terminal's Ctrl-Z does not reach:
      // they kept computing while the shell said the job was stopped.
      if (m_group) m_group->signal_running(SIGSTOP);
      // dlrun stops a moment later, unless a SIGCONT came meanwhile (a `kill -TSTP; kill -CONT`
      // handled in the other order left the job stopped for good).
      m_stop_self_timer.expires_after(std::chrono::milliseconds(20));
      m_stop_self_timer.async_wait([this, seen](const boost::system::error_code& ec) {
        if (ec || seen != m_job_control_seen) return;
        // Stopped as the shell expects, before kill() returns (a signal to oneself is delivered
        // then); it returns once SIGCONT has come: the ranks go on, and the watchdog counts from
        // now (its timer may come before that SIGCONT is handled).
        ::kill(::getpid(), SIGSTOP);
        if (m_group) m_group->signal_running(SIGCONT);
        m_resumed_at = std::chrono::steady_clock::now();
      });
    } else {
      m_stop_self_timer.cancel();
      if (m_group) m_group->signal_running(SIGCONT);
      m_resumed_at = std::chrono::steady_clock::now();
    }
    listen_for_job_control();
  });
}

void Supervisor::listen_for_signals() {
  m_stop_signals.async_wait([this](const boost::system::error_code& ec, int signal) {
    if (ec) return;
    handle_stop_signal(signal);
    listen_for_signals();
  });
}

void Supervisor::on_children_ended() {
  if (!m_group || m_phase == Phase::draining || m_phase == Phase::waiting || m_phase == Phase::done) return;
  bool failed_in_this_batch = false;
  std::vector<size_t> ended = m_group->reap();
  const auto failed = [this](size_t index) {
    const ExitStatus& status = *m_group->exit_status(index);
    return !status.success() && (status.signaled || status.code != exit_code::k_restart_me);
  };
  if (m_phase == Phase::running && !m_failure && m_group->running() > 0 &&
      std::any_of(ended.begin(), ended.end(), failed)) {
    // Ranks that fail together (an input every rank reads, a shape every rank checks) end
    // within moments of each other: those that end in the next few milliseconds failed on
    // their own, before any was told to stop, and the report names them.
    std::this_thread::sleep_for(k_failed_together);
    const std::vector<size_t> more = m_group->reap();
    ended.insert(ended.end(), more.begin(), more.end());
  }
  for (size_t index : ended) {
    const Member& member = m_group->member(index);
    const ExitStatus& status = *m_group->exit_status(index);
    log::debug("{} (pid {}) {}", member.name, m_group->pid(index), status.describe());
    if (m_phase == Phase::running && !m_failure && m_job.host_lost) {
      if (std::string why = m_job.host_lost(index, status); !why.empty()) {
        log::error("{}", why);
        m_failure = Failure{SIZE_MAX, ExitStatus::exited(exit_code::k_unavailable), why, {}, {}};
        m_failure->said = true;
        failed_in_this_batch = true;
        stop_group(SIGTERM);
        continue;
      }
    }
    if (status.success()) continue;
    if (!status.signaled && status.code == exit_code::k_restart_me) {
      m_restart_requested = true;
      continue;
    }
    if (failed_in_this_batch && m_failure) {
      // It had ended before the others were told to stop (reaped with the first failure): a
      // failure of its own, which the report names too.
      m_failure->failed_too.push_back(index);
      continue;
    }
    if (m_phase == Phase::running && !m_failure) {
      failed_in_this_batch = true;
      m_failure = Failure{index, status, {}, {}, {}};
      m_failure->at = std::chrono::steady_clock::now();
      for (size_t other = 0; other < m_group->size(); ++other) {
        const auto& ended = m_group->exit_status(other);
        if (other != index && ended && ended->success()) m_failure->ended_ok.push_back(other);
      }
      // Said now only while others are stopped (which may take the grace period); the report
      // at the end says it in full.
      if (size_t others = m_group->running()) {
        if (others == 1) {
          log::error("{} {}; stopping the other {}", member.name, status.describe(), m_job.member_noun);
        } else {
          log::error("{} {}; stopping the other {} {}s", member.name, status.describe(), others, m_job.member_noun);
        }
        m_failure->said = true;
      }
      stop_group(SIGTERM);
    }
  }
  if (m_phase == Phase::stopping) {
    // What these ranks started gets the stop signal now that they have ended (one that handled
    // it kept its helpers running meanwhile).
    for (size_t index : ended) m_group->signal_remnant(index, remnant_signal());
  }
  if (m_group->all_exited()) {
    if (m_phase == Phase::stopping && !m_killing && m_group->remnants_alive()) {
      wait_for_remnants();
    } else {
      begin_drain();
    }
  } else if (std::any_of(ended.begin(), ended.end(), [this](size_t i) { return m_group->exit_status(i)->success(); })) {
    watch_waiting_ranks();
  }
}

void Supervisor::handle_stop_signal(int signal) {
  if (m_phase == Phase::done) return;
  // What sent it, if dlrun cancel said (run_dir.hpp): the first stop signal's.
  if (signal == SIGTERM && !m_stop_signal && m_cancelled_by.empty()) {
    m_cancelled_by = cancel_note(m_job.run_dir, static_cast<int>(::getpid())).value_or("");
  }
  if (m_phase == Phase::waiting) {  // for a restart the ranks asked for: none comes now
    m_restart_timer.cancel();
    m_stop_signal = signal;
    finish(exit_code::k_signal_base + signal);
    return;
  }
  // The attempt is ending anyway: every member has exited (its output is draining), or a
  // failure is stopping the others. The signal hurries that along and lets nothing start again
  // (no restart, no resize), but the job's outcome stays what its members made of it.
  if (m_phase == Phase::draining || (m_failure && !m_stop_signal)) {
    if (!m_late_signal) m_late_signal = signal;
    if (m_phase == Phase::draining) {
      m_group->close_pipes();  // what they wrote is in; an escaped child's output is not waited for
      return;
    }
    if (!m_job.options.quiet && m_group->running() > 0) {
      log::warn("got {}: killing the other {} now", signal_name(signal), m_job.member_noun + "s");
    }
    if (m_job.deliver_signal) m_job.deliver_signal(signal);
    kill_members_now();
    return;
  }
  if (m_stop_signal) {
    // A second SIGTERM soon after the first is the same request, not an impatient user: Slurm
    // signals every step of a job, and srun passes the signal on to its tasks again (the grace
    // period was lost to it). Ctrl-C twice still kills at once, but not two SIGINTs of one
    // event, within 0.1 s (`timeout -s INT` signals dlrun and its process group: both arrive).
    const auto since = std::chrono::steady_clock::now() - m_stop_signal_at;
    if ((signal == SIGTERM && m_stop_signal == SIGTERM && since < k_same_sigterm) ||
        (signal == SIGINT && m_stop_signal == SIGINT && since < k_same_sigint)) {
      return;
    }
    log::warn("got {} again: killing all {}s now", signal_name(signal), m_job.member_noun);
    if (m_job.deliver_signal) m_job.deliver_signal(signal);
    kill_members_now();
    return;
  }
  m_stop_signal = signal;
  m_stop_signal_at = std::chrono::steady_clock::now();
  if (!m_job.options.quiet && m_group) {
    const int running = m_group->running();
    const std::string members = fmt::format("{} {}{}", running, m_job.member_noun, running == 1 ? "" : "s");
    if (!m_cancelled_by.empty()) {
      log::info("cancelled by {}: passing SIGTERM on to {}", m_cancelled_by, members);
    } else {
      log::info("got {}: passing it on to {}{}", signal_name(signal), members,
                signal == SIGINT ? " (Ctrl-C again to kill them at once)" : "");
    }
  }
  stop_group(signal);
}

bool Supervisor::agent_of_a_restart() const {
  // A `dlrun run` host's agent (the job's restart budget is another process's) is started anew
  // for each of the job's attempts: after the job's first, its first attempt is a restart.
  return m_job.job_max_restarts.has_value() && m_job.restarts_before > 0;
}

void Supervisor::handle_out_reader_gone() {
  if (m_phase == Phase::done) return;
  const std::string because = "standard output's reader has gone";
  if (m_phase == Phase::waiting) {  // for a restart: none comes now
    log::warn("{} (a pipe whose reader ended, as | head does): no restart", because);
    m_restart_timer.cancel();
    m_stop_signal = SIGPIPE;
    m_stopped_because = because;
    finish(exit_code::k_signal_base + SIGPIPE);
    return;
  }
  if (m_phase != Phase::running || m_stop_signal || m_failure || !m_group) {
    // The attempt is ending already (a failure, a resize, a stop): nothing starts again after it.
    if (!m_stop_signal && !m_late_signal) {
      log::warn("{} (a pipe whose reader ended, as | head does): nothing starts again", because);
      m_late_signal = SIGPIPE;
      m_stopped_because = because;
    }
    return;
  }
  m_stop_signal = SIGPIPE;
  m_stop_signal_at = std::chrono::steady_clock::now();
  m_stopped_because = because;
  log::warn("{} (a pipe whose reader ended, as | head does): stopping the {} {}{} (their whole output is in {})",
            m_stopped_because, m_group->running(), m_job.member_noun, m_group->running() == 1 ? "" : "s",
            !m_job.log_dir.empty() ? m_job.log_dir : !m_job.run_dir.empty() ? m_job.run_dir : "their logs");
  stop_group(SIGTERM);
}

void Supervisor::signal_members(int signal) {
  if (signal == SIGKILL) return m_group->signal_running(signal);
  // Each rank's own process, as torchrun: what it started (a DataLoader's workers) lives on while
  // it handles the signal (saves a checkpoint), and gets the signal once the rank has ended
  // (on_children_ended: a wrapper script's program).
  if (!m_job.deliver_signal || !m_job.deliver_signal(signal)) m_group->signal_leaders(signal);
}

int Supervisor::remnant_signal() const {
  const bool stop = m_stop_signal == SIGINT || m_stop_signal == SIGTERM || m_stop_signal == SIGHUP ||
                    m_stop_signal == SIGQUIT;
  return stop ? m_stop_signal : SIGTERM;
}

void Supervisor::kill_members_now() {
  m_killing = true;
  m_group->signal_running(SIGKILL);
  if (m_phase == Phase::stopping && m_group->all_exited()) begin_drain();
}

void Supervisor::wait_for_remnants() {
  m_remnant_timer.expires_after(std::chrono::milliseconds(50));
  m_remnant_timer.async_wait([this](const boost::system::error_code& ec) {
    if (ec || m_phase != Phase::stopping || !m_group) return;
    if (!m_group->remnants_alive()) return begin_drain();
    // What an orphan that ended meanwhile had started is an orphan now: its turn.
    for (size_t i = 0; i < m_group->size(); ++i) m_group->signal_remnant(i, remnant_signal());
    wait_for_remnants();
  });
}

void Supervisor::request_stop(const std::string& reason, int code) {
  asio::post(m_io, [this, reason, code] {
    if (m_phase == Phase::stopping && m_group) {
      // A stop under way that the rendezvous held for hosts that have now failed to join: it
      // reaches no one there; their sessions end instead (they ran until --grace was out).
      log::error("{}", reason);
      m_group->signal_running(SIGTERM);
      return;
    }
    if (m_phase != Phase::running || m_failure || !m_group) return;
    log::error("{}", reason);
    m_failure = Failure{SIZE_MAX, ExitStatus::exited(code), reason, {}, {}};
    stop_group(SIGTERM);
    if (m_group->all_exited()) begin_drain();
  });
}

void Supervisor::stop_group(int signal) {
  signal_members(signal);
  m_phase = Phase::stopping;
  m_grace_timer.expires_after(std::chrono::duration_cast<std::chrono::steady_clock::duration>(
      std::chrono::duration<double>(m_job.options.grace_seconds)));
  m_grace_timer.async_wait([this](const boost::system::error_code& ec) {
    if (!ec) on_grace_expired();
  });
}

void Supervisor::on_grace_expired() {
  if (m_phase != Phase::stopping || !m_group) return;
  if (m_group->all_exited()) {
    if (m_group->remnants_alive()) {
      log::warn("what the {}s started is still running {} s after the stop signal: killing it", m_job.member_noun,
                m_job.options.grace_seconds);
      begin_drain();
    }
    return;
  }
  if (m_pending_resize && !m_resize_restarts) {
    // Ranks that said they handle the stop request, and did not stop at a step: a program that
    // does not ask ctx.stop_requested() after its steps, or a step longer than the grace.
    m_resize_killed = true;
    log::warn("{} did not stop at a step within {:g} s of the resize's stop request: killing {}; they start "
              "again from their last checkpoint, if they saved one (does the program ask ctx.stop_requested() "
              "after every step? is a step longer than --grace?)",
              counted(m_group->running(), "rank"), m_job.options.grace_seconds,
              m_group->running() == 1 ? "it" : "them");
    kill_members_now();
    return;
  }
  // `dlrun run`'s members are hosts (their agents), not ranks.
  log::warn("{} still running {} s after the stop signal: killing {}", counted(m_group->running(), m_job.member_noun),
            m_job.options.grace_seconds, m_group->running() == 1 ? "it" : "them");
  kill_members_now();
}

void Supervisor::begin_drain() {
  m_grace_timer.cancel();
  m_remnant_timer.cancel();
  m_killing = false;
  m_group->kill_all_groups();
  m_phase = Phase::draining;
  // What is left in the pipes goes to the logs now, whatever the terminal's pace (it is bounded).
  m_terminal.set_hold_back(false);
  if (m_group->drained()) {
    asio::post(m_io, [this] { finish_attempt(); });
    return;
  }
  // Output may still sit in the pipes; a rank's escaped child may even hold them open.
  m_group->on_drained([this] {
    m_drain_timer.cancel();
    asio::post(m_io, [this] { finish_attempt(); });
  });
  m_drain_timer.expires_after(k_drain_timeout);
  m_drain_timer.async_wait([this](const boost::system::error_code& ec) {
    if (!ec && m_phase == Phase::draining) m_group->close_pipes();
  });
}

void Supervisor::finish_attempt() {
  if (m_phase != Phase::draining) return;
  AttemptEnd end;
  end.stop_signal = m_stop_signal;
  end.late_signal = m_late_signal;
  end.resize_pending = m_pending_resize.has_value();
  end.restart_requested = m_restart_requested;
  if (m_failure) {
    blame_likelier_cause(*m_failure);
    end.failure_code = m_failure->status.shell_code();
    read_error_file_of(*m_failure);
  }
  end.all_succeeded = all_succeeded();
  end.failures_restarted = m_failures_restarted;
  end.max_restarts = m_job.options.max_restarts;
  const Decision decision = decide_after_attempt(end);
  if (decision.stopped && !m_stop_signal) m_stop_signal = m_late_signal;  // a restart it prevented
  switch (decision.step) {
    case NextStep::finished_before_resize:
      m_pending_resize.reset();
      answer_resize("error: the job finished before it could be resized");
      finish(decision.exit_code);
      return;
    case NextStep::resize:
      m_quick_requests = 0;
      say_failure_once();
      apply_resize();
      return;
    case NextStep::restart_after_failure: {
      m_quick_requests = 0;  // restarts asked for in a row, and this is none
      report_failure();
      const bool left_out = leave_out_failing_gpu(*m_failure);
      ++m_failures_restarted;
      count_restart();
      // Left out: the next attempt has one rank fewer than the one that failed.
      log::warn("restarting {} (restart {} of {})",
                all_of(left_out ? static_cast<size_t>(m_job.world_size) : m_group->size(), m_job.member_noun),
                m_failures_restarted, m_job.options.max_restarts);
      start_attempt();
      return;
    }
    case NextStep::restart_on_request: {
      const auto lasted = std::chrono::steady_clock::now() - m_attempt_started;
      m_quick_requests = lasted < k_quick_attempt ? m_quick_requests + 1 : 0;
      if (restart_requests_loop(m_quick_requests)) {
        // Not a request any more but a loop (a checkpoint that cannot be read, a program that
        // exits 75 for reasons of its own): the job fails, with 1 (75 would ask a `dlrun run`
        // launcher, or Slurm's requeue, for yet another restart).
        const std::string reason = fmt::format(
            "ranks asked to be restarted (exit {}) {} times in a row, each within {} s of its start: treating it as a "
            "failure (exit {} asks dlrun for a restart: a program that cannot read its checkpoint, or one that "
            "exits {} for reasons of its own?)",
            exit_code::k_restart_me, m_quick_requests, k_quick_attempt.count(), exit_code::k_restart_me,
            exit_code::k_restart_me);
        log::error("{}", reason);
        m_failure = Failure{SIZE_MAX, ExitStatus::exited(exit_code::k_failure), reason};
        m_failure->said = true;
        finish(exit_code::k_failure);
        return;
      }
      ++m_requested_restarts;
      count_restart();
      const auto delay = m_job.restart_waits ? restart_request_delay(m_quick_requests) : std::chrono::milliseconds(0);
      if (delay.count() == 0) {
        if (!m_job.options.quiet) {
          log::info("ranks asked to be restarted: restarting {}", all_of(m_job.world_size, "rank"));
        }
        start_attempt();
        return;
      }
      log::warn("ranks asked to be restarted (exit {}) {} times in a row, each within {} s of its start: "
                "restarting {} in {:g} s",
                exit_code::k_restart_me, m_quick_requests, k_quick_attempt.count(), all_of(m_job.world_size, "rank"),
                std::chrono::duration<double>(delay).count());
      m_phase = Phase::waiting;
      m_restart_timer.expires_after(delay);
      m_restart_timer.async_wait([this](const boost::system::error_code& ec) {
        if (!ec && m_phase == Phase::waiting) start_attempt();
      });
      return;
    }
    case NextStep::finish:
      if (m_failure && !m_stop_signal) {
        report_failure();
        leave_out_failing_gpu(*m_failure);
        if (decision.budget_spent) log::error("no restarts left ({} used)", m_failures_restarted);
      }
      finish(decision.exit_code);
      return;
  }
}

bool Supervisor::all_succeeded() const {
  for (size_t i = 0; i < m_group->size(); ++i) {
    const auto& exit = m_group->exit_status(i);
    if (!exit || !exit->success()) return false;
  }
  return true;
}

void Supervisor::read_error_file_of(Failure& failure) const {
  if (!failure.reason.empty()) return;
  if (const std::string* path = error_file_of(m_group->member(failure.index))) {
    failure.error = read_error_file(*path);
    failure.error_path = *path;
  }
}

void Supervisor::blame_likelier_cause(Failure& failure) const {
  if (!failure.reason.empty() || failure.first || m_job.member_noun != "rank" || failure.index >= m_group->size())
    return;
  if (!lost_a_peer(m_group->stderr_tail(failure.index))) return;
  for (size_t i = 0; i < m_group->size(); ++i) {
    const auto& status = m_group->exit_status(i);
    if (i == failure.index || !status || status->success()) continue;
    if (!status->signaled && status->code == exit_code::k_restart_me) continue;
    if (!tells_of_an_error(m_group->stderr_tail(i))) continue;
    // Its error must belong to this failure: written within moments of it (an error it wrote
    // long before, and lived on after, is not the cause).
    const auto wrote = m_group->last_output(i);
    if (!wrote || std::chrono::abs(*wrote - failure.at) > k_same_failure) continue;
    // Its error came first, and closing its connections (in a `finally`, at its exit) failed
    // the collective the other was in, which then exited sooner.
    failure.first = Failure::First{failure.index, failure.status};
    failure.index = i;
    // The job's exit code is the cause's own, unless dlrun's stop ended it (then the first's).
    failure.cause_stopped = status->signaled;
    if (!status->signaled) failure.status = *status;
    failure.failed_too.erase(std::remove(failure.failed_too.begin(), failure.failed_too.end(), i),
                             failure.failed_too.end());
    return;
  }
}

std::string Supervisor::failure_headline(const Failure& failure, bool brief) const {
  const Member& member = m_group->member(failure.index);
  if (!failure.first) return fmt::format("{} {}", member.name, failure.status.describe());
  const std::string cause =
      fmt::format("{} {}", member.name, failure.cause_stopped ? "failed" : failure.status.describe());
  const std::string& first = m_group->member(failure.first->index).name;
  if (brief) return fmt::format("{} ({} had lost a peer and failed first)", cause, first);
  const auto& first_tail = m_group->stderr_tail(failure.first->index);
  return fmt::format("{}{}: the likelier cause, though {} {} before it: {} had lost a peer{}", cause,
                     failure.cause_stopped ? " (stopped by dlrun after its error)" : "", first,
                     failure.first->status.describe(), first, first_tail.empty() ? "" : " (" + first_tail.back() + ")");
}

// A failure that no report will say (a stop signal came, or a resize ends the attempt) is said
// once, briefly.
void Supervisor::say_failure_once() {
  if (!m_failure || m_failure->said || !m_failure->reason.empty() || !m_group) return;
  if (m_failure->index >= m_group->size()) return;
  log::error("{}", failure_headline(*m_failure));
  m_failure->said = true;
}

void Supervisor::report_failure() {
  Failure& failure = *m_failure;
  if (!failure.reason.empty()) return;  // said when it happened
  failure.said = true;
  const Member& member = m_group->member(failure.index);
  const auto& tail = m_group->stderr_tail(failure.index);
  const std::string& log_path = member.log_path;
  std::string what = failure_headline(failure);
  if (failure.error && !failure.error->message.empty()) what += fmt::format(": {}", first_line(failure.error->message));
  // A SIGKILL dlrun did not send (this member failed first, by itself): most often the kernel's
  // out-of-memory killer, which leaves nothing in the rank's own output.
  if (failure.status.signaled && failure.status.signal == SIGKILL && !failure.error) {
    what += " (dlrun did not send it: the kernel's out-of-memory killer sends SIGKILL; `dmesg | grep -i oom`, or "
            "memory.events of the job's cgroup, says whether it did)";
  }
  // Where the failing rank's stderr tells of its peers (not for ranks that fail alone): ranks
  // that had ended with 0 when it failed (a rank that leaves early fails the others'
  // collectives, and is the likelier cause), and another rank that exited with an error
  // meanwhile, whose words (a model of another shape) often say what went wrong.
  const bool about_peers = tells_of_peers(m_group->stderr_tail(failure.index));
  std::string also;
  for (size_t i = 0; i < m_group->size() && about_peers && also.empty(); ++i) {
    const auto& status = m_group->exit_status(i);
    if (i == failure.index || !status || status->signaled || status->code == 0 ||
        status->code == exit_code::k_restart_me || status->code > 128)
      continue;
    const auto& tail = m_group->stderr_tail(i);
    if (tail.empty() || tells_of_peers(tail)) continue;
    also = fmt::format("; {} {} too, its last stderr line: {}", m_group->member(i).name, status->describe(), tail.back());
  }
  if (about_peers && !failure.ended_ok.empty() && failure.ended_ok.size() < 4) {
    std::vector<std::string> left;
    for (size_t i : failure.ended_ok) left.push_back(m_group->member(i).name);
    what += fmt::format(" ({} had ended with code 0 before it: a rank that leaves while the others train fails "
                        "their collectives)",
                        listed(left));
  }
  what += also;
  if (also.empty() && !failure.failed_too.empty()) {
    // Ranks that failed at the same moment (before any was told to stop): named, with their
    // last stderr line when they wrote one (only the first one's tail is quoted below).
    std::vector<std::string> others;
    for (size_t i : failure.failed_too) {
      const auto& status = m_group->exit_status(i);
      if (!status) continue;
      const auto& other_tail = m_group->stderr_tail(i);
      others.push_back(other_tail.empty()
                           ? fmt::format("{} {}", m_group->member(i).name, status->describe())
                           : fmt::format("{} {} (its last stderr line: {})", m_group->member(i).name,
                                         status->describe(), other_tail.back()));
      if (others.size() == 3) break;
    }
    if (!others.empty()) {
      const size_t unnamed = failure.failed_too.size() - others.size();
      what += fmt::format("; at the same moment {}{}", listed(others),
                          unnamed ? fmt::format(" and {} more", counted(static_cast<long long>(unnamed), m_job.member_noun)) : "");
    }
  }
  if (failure.error && !failure.error->traceback.empty() && m_job.options.tail_lines > 0) {
    // The exception the rank recorded (@record): its traceback says more than its stderr's tail.
    std::string text = fmt::format("{}; its traceback (from {}; all its output in {}):", what,
                                   failure.error_path, log_path);
    for (const auto& line : traceback_lines(failure.error->traceback, k_max_traceback_lines)) text += "\n  | " + line;
    log::error("{}", text);
    return;
  }
  if (m_job.options.tail_lines <= 0) {
    log::error("{} (its output: {})", what, log_path);
    return;
  }
  if (m_job.member_noun != "rank" && !m_group->first_dlrun_error(failure.index).empty()) {
    // A host's (or Slurm step's) dlrun said which rank failed, and that rank's stderr, on the
    // terminal already: quoting it again would say it twice more.
    log::error("{} (what it said is above; all in {})", what, log_path);
    return;
  }
  if (tail.empty()) {
    log::error("{}; it wrote nothing to stderr (its log: {})", what, log_path);
    return;
  }
  std::string text = fmt::format("{}; last {} line{} of its stderr (all in {}):", what, tail.size(),
                                 tail.size() == 1 ? "" : "s", log_path);
  for (const auto& line : tail) text += "\n  | " + line;
  text += missing_module_hint(tail, member.program, own_python_package_dir());
  const auto port = member.spec.env.find(env::k_master_port);
  text += port_in_use_hint(tail, port == member.spec.env.end() ? "" : port->second);
  text += debugger_hint(tail, member.program);
  log::error("{}", text);
}

void Supervisor::record(const std::string& state, std::optional<int> code) {
  RunRecord record;
  record.id = m_job.job_id;
  record.state = state;
  record.world_size = m_job.world_size;
  record.restarts = m_restart_count;
  record.dlrun_pid = ::getpid();
  record.run_dir = m_job.run_dir;
  record.updated_at = utc_iso8601(std::time(nullptr));
  record.command = m_job.program.argv;
  record.exit_code = code;
  if (code && *code != 0) {
    record.reason = m_summary;
    record.failed_rank = m_failed_rank;
  }
  try {
    write_run_record(m_job.run_dir, record);
  } catch (const Error& e) {
    log::warn("{}", e.what());
  }
}

// A time limit is the job's whole run, restarts and resizes included (as Slurm's), from its
// first start: when it passes, the job stops as a cancel does (SIGTERM, the grace period, then
// SIGKILL), so a program on the runtime saves its checkpoint; its record says why.
void Supervisor::arm_time_limit() {
  const double limit = m_job.options.time_limit_seconds;
  if (limit <= 0) return;
  m_time_limit_timer.expires_after(
      std::chrono::duration_cast<std::chrono::steady_clock::duration>(std::chrono::duration<double>(limit)));
  m_time_limit_timer.async_wait([this, limit](const boost::system::error_code& ec) {
    if (ec || m_phase == Phase::done || m_stop_signal) return;
    m_cancelled_by = fmt::format("its time_limit ({:g} s)", limit);
    log::warn("the job has run for its time_limit ({:g} s): stopping it", limit);
    handle_stop_signal(SIGTERM);
  });
}

// Every 10 s while the job runs, job.json's time is set to now: a supervisor killed outright
// (SIGKILL, a reboot) leaves the job's end there, give or take 10 s, which the sweep that finds
// it lost records (it took its own time: hours later after a reboot).
void Supervisor::keep_alive_mark() {
  if (m_job.run_dir.empty()) return;
  m_alive_timer.expires_after(std::chrono::seconds(10));
  m_alive_timer.async_wait([this](const boost::system::error_code& ec) {
    if (ec || m_phase == Phase::done) return;
    ::utimensat(AT_FDCWD, (m_job.run_dir + "/job.json").c_str(), nullptr, 0);
    keep_alive_mark();
  });
}

void Supervisor::count_restart() {
  ++m_restart_count;
  if (m_job.on_restart) m_job.on_restart({m_restart_count, m_failures_restarted, m_resizes, m_requested_restarts});
}

void Supervisor::finish(int code) {
  m_exit_code = code;
  say_failure_once();
  if (m_stop_signal) {
    m_summary = !m_stopped_because.empty() ? "stopped: " + m_stopped_because
                : m_cancelled_by.empty()      ? fmt::format("stopped by {}", signal_name(m_stop_signal))
                                              : "by " + m_cancelled_by;
  } else if (m_failure && !m_failure->reason.empty()) {
    m_summary = m_failure->reason;
  } else if (m_failure) {
    m_summary = failure_headline(*m_failure, true);
    if (m_failure->error && !m_failure->error->message.empty()) {
      m_summary += fmt::format(": {}", first_line(m_failure->error->message));
    }
  }
  if (!m_stop_signal && m_failure && m_failure->index < m_group->size()) {
    if (m_job.member_noun == "rank" && !m_job.planner) {
      m_failed_rank = m_group->member(m_failure->index).spec.rank;
    } else if (m_job.member_noun != "rank") {
      const std::string said = m_group->first_dlrun_error(m_failure->index);
      m_failed_rank = rank_in_dlrun_error(said);
      // The agent's words name the rank and how it ended, the member's exit only the host.
      if (m_failed_rank && m_failure->reason.empty()) {
        m_summary = fmt::format("{} ({})", dlrun_error_text(said), m_group->member(m_failure->index).name);
      }
    }
  }
  m_phase = Phase::done;
  m_alive_timer.cancel();
  m_time_limit_timer.cancel();
  drop_held_signals("the job ended first");
  record(code == 0 ? "succeeded" : (m_stop_signal ? "cancelled" : "failed"), code);
  if (m_job.on_end) m_job.on_end({code, m_stop_signal, m_summary, m_failed_rank});
  m_stop_signals.cancel();
  m_job_control.clear();  // Ctrl-Z stops dlrun itself again while it ends
  m_stop_self_timer.cancel();
  m_resize_signal.cancel();
  m_watchdog_timer.cancel();
  m_waiting_timer.cancel();
  m_restart_timer.cancel();
}

}  // namespace dlrun::launcher
