#pragma once
// What the Supervisor sees of one attempt's processes, and what starts them: a MemberGroup
// per attempt, made by a ProcessRunner. The real ones fork and exec (WorkerGroup,
// make_process_runner()); unit tests give fakes, so that the supervisor's decisions are
// tested without starting a process (ninja's CommandRunner is the model). Both live on the
// supervisor's thread and its io_context; neither is thread-safe.

#include <sys/types.h>

#include <deque>
#include <functional>
#include <memory>
#include <chrono>
#include <optional>
#include <string>
#include <vector>

#include <boost/asio/io_context.hpp>

#include "dlrun/launcher/exit_status.hpp"
#include "dlrun/launcher/member.hpp"
#include "dlrun/launcher/rank_output.hpp"

namespace dlrun::launcher {

class MemberGroup {
 public:
  virtual ~MemberGroup() = default;

  // Members that have ended since the last call (non-blocking), as indices in end order.
  virtual std::vector<size_t> reap() = 0;
  // Sends `signal` to the process group of every member still running.
  virtual void signal_running(int signal) = 0;
  // Sends `signal` to every running member's own process only (a stop request must not
  // reach, and kill, the member's helper processes).
  virtual void signal_leaders(int signal) = 0;
  // SIGKILL to every member's process group, also of members that ended.
  virtual void kill_all_groups() = 0;
  // Sends `signal` to what an ended member left running in its process group: the processes it
  // started whose parent has ended (a wrapper script's program; a DataLoader's workers only
  // once that program has ended too), each once.
  virtual void signal_remnant(size_t index, int signal) = 0;
  // Whether an ended member's process group still has a process in it.
  virtual bool remnants_alive() const = 0;
  // Stops reading output: what is still in the pipes is dropped (after a drain timeout, or
  // a stop signal then); a last line without its newline is passed on.
  virtual void close_pipes() = 0;
  // Called once when the last output pipe of the group has closed.
  virtual void on_drained(std::function<void()> callback) = 0;

  virtual size_t size() const = 0;
  virtual size_t running() const = 0;
  bool all_exited() const { return running() == 0; }
  virtual bool drained() const = 0;
  virtual const Member& member(size_t index) const = 0;
  virtual pid_t pid(size_t index) const = 0;
  // The CPU seconds a running member's process group has used (cpu_time.hpp); nullopt when it
  // cannot be told.
  virtual std::optional<double> cpu_seconds(size_t index) const = 0;
  virtual const std::optional<ExitStatus>& exit_status(size_t index) const = 0;
  // The last lines the member wrote to stderr (shown when it fails).
  virtual const std::deque<std::string>& stderr_tail(size_t index) const = 0;
  // The first line member `index` wrote to stderr as a nested dlrun's error (a `dlrun run`
  // host's agent: "dlrun[HOST]: error: rank 5 …"), whatever the tail keeps; empty if none.
  virtual std::string first_dlrun_error(size_t index) const = 0;
  // When member `index` last wrote output (the watchdog's sign of progress for a program that
  // does not report it); nullopt when it wrote none, or when it cannot be told.
  virtual std::optional<std::chrono::steady_clock::time_point> last_output(size_t) const { return std::nullopt; }
};

class ProcessRunner {
 public:
  using OutputFactory = std::function<std::unique_ptr<RankOutput>(const Member&)>;
  virtual ~ProcessRunner() = default;

  // Before the first attempt: `children_changed` is to be called on the io_context
  // whenever members may have ended (the real runner: on SIGCHLD).
  virtual void begin(std::function<void()> children_changed) = 0;
  // After the last attempt, once its group is gone.
  virtual void end() = 0;
  // Starts one attempt's members. On a spawn error nothing of it is left running, and the
  // error is thrown.
  virtual std::unique_ptr<MemberGroup> start(const std::vector<Member>& members,
                                             const OutputFactory& make_output) = 0;
};

// The real one: fork/exec (WorkerGroup), an orphan guard for the ranks' process groups, and
// SIGCHLD through the io_context.
std::unique_ptr<ProcessRunner> make_process_runner(boost::asio::io_context& io);

}  // namespace dlrun::launcher
