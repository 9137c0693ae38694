#pragma once
// One attempt at running a node's members, for real: starts every member process, reads
// their output into their RankOutputs as it arrives (through the supervisor's Asio
// io_context), reaps them when they end and signals their process groups. The MemberGroup
// that make_process_runner() gives the Supervisor. Knows nothing of policy (restarts, which
// failure matters): that is the Supervisor's. Not thread-safe: lives on the supervisor's
// thread; the io_context must outlive it.

#include <sys/types.h>

#include <functional>
#include <map>
#include <set>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include <boost/asio/io_context.hpp>
#include <boost/asio/posix/stream_descriptor.hpp>

#include "dlrun/launcher/exit_status.hpp"
#include "dlrun/launcher/member.hpp"
#include "dlrun/launcher/member_group.hpp"
#include "dlrun/launcher/orphan_guard.hpp"
#include "dlrun/launcher/rank_output.hpp"

namespace dlrun::launcher {

class WorkerGroup : public MemberGroup {
 public:
  using OutputFactory = ProcessRunner::OutputFactory;

  struct Rank {
    Member member;
    pid_t pid = -1;
    std::optional<ExitStatus> exit;
    std::unique_ptr<RankOutput> output;
    std::unique_ptr<boost::asio::posix::stream_descriptor> pipes[2];  // stdout, stderr
    int stdin_fd = -1;  // held open while the group lives (see Member::stdin_text)
  };

  // `token`: set as DLRUN_SUPERVISOR_ID in every member's environment (empty: none).
  WorkerGroup(boost::asio::io_context& io, OrphanGuard& guard, std::string token = {});
  ~WorkerGroup() override;
  WorkerGroup(const WorkerGroup&) = delete;
  WorkerGroup& operator=(const WorkerGroup&) = delete;

  // Starts all ranks. On a spawn error kills the ranks already started and rethrows.
  void start(const std::vector<Member>& members, const OutputFactory& make_output);

  // Reaps ranks that have ended (non-blocking); returns their indices in end order.
  // dlrun's other children (the orphan guard) are reaped too and ignored.
  std::vector<size_t> reap() override;

  void on_drained(std::function<void()> callback) override { m_on_drained = std::move(callback); }
  void signal_running(int signal) override;
  void signal_leaders(int signal) override;
  // Their children must not outlive the job either.
  void kill_all_groups() override;
  void signal_remnant(size_t index, int signal) override;
  bool remnants_alive() const override;
  void close_pipes() override;

  size_t size() const override { return m_ranks.size(); }
  size_t running() const override;
  bool drained() const override { return m_open_pipes == 0; }
  const Member& member(size_t index) const override { return m_ranks.at(index).member; }
  pid_t pid(size_t index) const override { return m_ranks.at(index).pid; }
  std::optional<double> cpu_seconds(size_t index) const override;
  const std::optional<ExitStatus>& exit_status(size_t index) const override { return m_ranks.at(index).exit; }
  std::optional<std::chrono::steady_clock::time_point> last_output(size_t index) const override {
    return m_ranks.at(index).output->last_output();
  }
  std::string first_dlrun_error(size_t index) const override {
    return m_ranks.at(index).output->first_dlrun_error();
  }
  const std::deque<std::string>& stderr_tail(size_t index) const override {
    return m_ranks.at(index).output->stderr_tail();
  }
  const Rank& rank(size_t index) const { return m_ranks.at(index); }
  Rank& rank(size_t index) { return m_ranks.at(index); }

 private:
  void arm_read(size_t index, int stream);
  void read_when_room(size_t index, int stream);  // arm_read, once the terminal is not behind
  void pipe_closed();
  void close_pipes(bool finish_lines);  // false: the group is going, its output with it

  boost::asio::io_context& m_io;
  OrphanGuard& m_guard;
  std::string m_token;
  std::vector<Rank> m_ranks;
  size_t m_open_pipes = 0;
  std::vector<char> m_buffer;
  std::map<pid_t, size_t> m_index_of_pid;
  std::function<void()> m_on_drained;
  std::shared_ptr<bool> m_alive;  // read handlers check it: the group may be gone
  std::set<pid_t> m_remnants_signalled;  // orphans of ended ranks already given the stop signal
};

}  // namespace dlrun::launcher
