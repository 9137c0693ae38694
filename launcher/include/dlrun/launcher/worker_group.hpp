#pragma once
// One attempt at running a node's ranks: starts every rank process, reads their output
// into their RankOutputs as it arrives (through the supervisor's Asio io_context), reaps
// them when they end and signals their process groups. Knows nothing of policy (restarts,
// which failure matters): that is the Supervisor's. Not thread-safe: lives on the
// supervisor's thread; the io_context must outlive it.

#include <sys/types.h>

#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include <boost/asio/io_context.hpp>
#include <boost/asio/posix/stream_descriptor.hpp>

#include "dlrun/launcher/exit_status.hpp"
#include "dlrun/launcher/orphan_guard.hpp"
#include "dlrun/launcher/prefix_template.hpp"
#include "dlrun/launcher/rank_env.hpp"
#include "dlrun/launcher/rank_output.hpp"

namespace dlrun::launcher {

struct ProgramSpec {
  std::string path;               // resolved, see resolve_program()
  std::vector<std::string> argv;  // argv[0] as the user wrote it
  std::string working_dir;
};

// One process of a group: a rank (dlrun local, an agent) or a whole node (dlrun run,
// where each member is the ssh session of one host's agent).
struct Member {
  RankSpec spec;         // spec.rank orders the members; spec.env is the process's environment
  ProgramSpec program;
  std::string name;      // in messages: "rank 3", "host b (node 1)"
  std::string log_path;  // where its output is kept; empty: not kept
  RankLabel label;       // for the --prefix template
  std::optional<std::string> stdin_text;  // see SpawnRequest::stdin_text
};

class WorkerGroup {
 public:
  using OutputFactory = std::function<std::unique_ptr<RankOutput>(const Member&)>;

  struct Rank {
    Member member;
    pid_t pid = -1;
    std::optional<ExitStatus> exit;
    std::unique_ptr<RankOutput> output;
    std::unique_ptr<boost::asio::posix::stream_descriptor> pipes[2];  // stdout, stderr
    int stdin_fd = -1;  // held open while the group lives (see Member::stdin_text)
  };

  WorkerGroup(boost::asio::io_context& io, OrphanGuard& guard);
  ~WorkerGroup();
  WorkerGroup(const WorkerGroup&) = delete;
  WorkerGroup& operator=(const WorkerGroup&) = delete;

  // Starts all ranks. On a spawn error kills the ranks already started and rethrows.
  void start(const std::vector<Member>& members, const OutputFactory& make_output);

  // Reaps ranks that have ended (non-blocking); returns their indices in end order.
  // dlrun's other children (the orphan guard) are reaped too and ignored.
  std::vector<size_t> reap();

  // Called once when the last output pipe of the group has closed.
  void on_drained(std::function<void()> callback) { m_on_drained = std::move(callback); }

  // Sends `signal` to the process group of every rank still running.
  void signal_running(int signal);
  // Sends `signal` to every running rank's own process only (a stop request must not
  // reach, and kill, the rank's helper processes).
  void signal_leaders(int signal);
  // SIGKILL to every rank's process group, also of ranks that ended: their children
  // must not outlive the job.
  void kill_all_groups();
  // Stops reading: output still in the pipes is dropped (used after a drain timeout).
  void close_pipes();

  size_t size() const { return m_ranks.size(); }
  size_t running() const;
  bool all_exited() const { return running() == 0; }
  bool drained() const { return m_open_pipes == 0; }
  const Rank& rank(size_t index) const { return m_ranks.at(index); }
  Rank& rank(size_t index) { return m_ranks.at(index); }

 private:
  void arm_read(size_t index, int stream);
  void pipe_closed();

  boost::asio::io_context& m_io;
  OrphanGuard& m_guard;
  std::vector<Rank> m_ranks;
  size_t m_open_pipes = 0;
  std::vector<char> m_buffer;
  std::map<pid_t, size_t> m_index_of_pid;
  std::function<void()> m_on_drained;
  std::shared_ptr<bool> m_alive;  // read handlers check it: the group may be gone
};

}  // namespace dlrun::launcher
