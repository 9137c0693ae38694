#include "dlrun/launcher/worker_group.hpp"

#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <memory>

#include <boost/asio/steady_timer.hpp>

#include "dlrun/error.hpp"
#include "dlrun/launcher/cpu_time.hpp"
#include "dlrun/log.hpp"
#include "dlrun/launcher/process.hpp"
#include "dlrun/protocol.hpp"

namespace dlrun::launcher {

namespace asio = boost::asio;

namespace {
constexpr auto k_room_poll = std::chrono::milliseconds(10);  // while the terminal is behind
}  // namespace

WorkerGroup::WorkerGroup(asio::io_context& io, OrphanGuard& guard, std::string token)
    : m_io(io), m_guard(guard), m_token(std::move(token)), m_buffer(64 * 1024), m_alive(std::make_shared<bool>(true)) {}

WorkerGroup::~WorkerGroup() {
  *m_alive = false;
  m_on_drained = nullptr;
  if (running() > 0) {
    signal_running(SIGKILL);
    for (auto& rank : m_ranks) {
      if (rank.pid > 0 && !rank.exit) ::waitpid(rank.pid, nullptr, 0);
    }
  }
  close_pipes(false);
  for (auto& rank : m_ranks) {
    if (rank.stdin_fd >= 0) ::close(rank.stdin_fd);
  }
}

void WorkerGroup::start(const std::vector<Member>& members, const OutputFactory& make_output) {
  m_ranks.clear();
  m_ranks.reserve(members.size());
  std::vector<SpawnedProcess> spawned;
  spawned.reserve(members.size());
  try {
    for (const auto& member : members) {
      const ProgramSpec& program = member.program;
      SpawnRequest request{program.path, program.argv, member.spec.env, program.working_dir, member.stdin_text,
                           member.stdin_from};
      if (!m_token.empty()) request.env[env::k_supervisor_id] = m_token;
      spawned.push_back(spawn_process(request));
      m_guard.watch(spawned.back().pid);
      Rank rank;
      rank.member = member;
      rank.pid = spawned.back().pid;
      rank.stdin_fd = spawned.back().stdin_fd;
      rank.output = make_output(member);
      rank.pipes[0] = std::make_unique<asio::posix::stream_descriptor>(m_io, spawned.back().stdout_fd);
      rank.pipes[1] = std::make_unique<asio::posix::stream_descriptor>(m_io, spawned.back().stderr_fd);
      m_index_of_pid[rank.pid] = m_ranks.size();
      m_ranks.push_back(std::move(rank));
      m_open_pipes += 2;
    }
    for (size_t i = 0; i < spawned.size(); ++i) await_exec(spawned[i], members[i].program.argv.at(0));
  } catch (...) {
    for (auto& process : spawned) {
      if (process.exec_status_fd >= 0) ::close(process.exec_status_fd);
    }
    signal_running(SIGKILL);
    for (auto& rank : m_ranks) ::waitpid(rank.pid, nullptr, 0);
    for (auto& rank : m_ranks) m_guard.forget(rank.pid);
    for (auto& process : spawned) {
      if (process.stdin_fd >= 0) ::close(process.stdin_fd);
    }
    m_ranks.clear();
    m_index_of_pid.clear();
    m_open_pipes = 0;
    throw;
  }
  for (size_t i = 0; i < m_ranks.size(); ++i) {
    arm_read(i, 0);
    arm_read(i, 1);
  }
}

void WorkerGroup::arm_read(size_t index, int stream) {
  auto& pipe = *m_ranks[index].pipes[stream];
  std::weak_ptr<bool> alive = m_alive;
  pipe.async_wait(asio::posix::stream_descriptor::wait_read,
                  [this, alive, index, stream](const boost::system::error_code& ec) {
                    auto still = alive.lock();
                    if (!still || !*still) return;
                    Rank& rank = m_ranks[index];
                    auto& pipe = rank.pipes[stream];
                    if (!pipe || !pipe->is_open()) return;
                    Stream which = stream == 0 ? Stream::out : Stream::err;
                    ssize_t n = -1;
                    if (!ec) {
                      do {
                        n = ::read(pipe->native_handle(), m_buffer.data(), m_buffer.size());
                      } while (n < 0 && errno == EINTR);
                      if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) {
                        arm_read(index, stream);
                        return;
                      }
                    }
                    if (n > 0) {
                      rank.output->on_data(which, std::string_view(m_buffer.data(), static_cast<size_t>(n)));
                      read_when_room(index, stream);
                      return;
                    }
                    rank.output->on_eof(which);
                    boost::system::error_code ignored;
                    pipe->close(ignored);
                    pipe_closed();
                  });
}

void WorkerGroup::read_when_room(size_t index, int stream) {
  if (!m_ranks[index].output->held_back()) return arm_read(index, stream);
  // The terminal is behind: the rank's pipe fills and holds the rank, not dlrun.
  auto timer = std::make_shared<asio::steady_timer>(m_io, k_room_poll);
  std::weak_ptr<bool> alive = m_alive;
  timer->async_wait([this, alive, timer, index, stream](const boost::system::error_code& ec) {
    auto still = alive.lock();
    if (ec || !still || !*still) return;
    auto& pipe = m_ranks[index].pipes[stream];
    if (pipe && pipe->is_open()) read_when_room(index, stream);
  });
}

void WorkerGroup::pipe_closed() {
  if (--m_open_pipes == 0 && m_on_drained) m_on_drained();
}

std::vector<size_t> WorkerGroup::reap() {
  // One waitpid(-1) per ended child, not one per rank: SIGCHLDs coalesce, and with
  // hundreds of ranks polling each pid would cost a quadratic number of calls.
  std::vector<size_t> ended;
  while (true) {
    int status = 0;
    pid_t pid = ::waitpid(-1, &status, WNOHANG);
    if (pid < 0 && errno == EINTR) continue;
    if (pid <= 0) break;
    auto it = m_index_of_pid.find(pid);
    if (it == m_index_of_pid.end()) continue;  // not ours (the orphan guard)
    Rank& rank = m_ranks[it->second];
    rank.exit = ExitStatus::from_wait_status(status);
    ended.push_back(it->second);
  }
  return ended;
}

void WorkerGroup::signal_running(int signal) {
  for (auto& rank : m_ranks) {
    if (!rank.exit && rank.pid > 0) ::kill(-rank.pid, signal);
  }
}

void WorkerGroup::signal_leaders(int signal) {
  for (auto& rank : m_ranks) {
    if (!rank.exit && rank.pid > 0) ::kill(rank.pid, signal);
  }
}

void WorkerGroup::kill_all_groups() {
  for (auto& rank : m_ranks) {
    if (rank.pid <= 0) continue;
    ::kill(-rank.pid, SIGKILL);
    m_guard.forget(rank.pid);
  }
}

void WorkerGroup::signal_remnant(size_t index, int signal) {
  const Rank& rank = m_ranks.at(index);
  if (!rank.exit || rank.pid <= 0) return;
  // What the ended rank left is this process's now (its subreaper): each such orphan gets the
  // signal once, and what it started only once it has ended in turn (a wrapper's program keeps
  // its DataLoader workers while it saves a checkpoint).
  for (pid_t orphan : children_in_group(rank.pid, ::getpid())) {
    if (m_remnants_signalled.insert(orphan).second) ::kill(orphan, signal);
  }
}

bool WorkerGroup::remnants_alive() const {
  for (const auto& rank : m_ranks) {
    if (rank.exit && rank.pid > 0 && ::kill(-rank.pid, 0) == 0) return true;
  }
  return false;
}

void WorkerGroup::close_pipes() { close_pipes(true); }

void WorkerGroup::close_pipes(bool finish_lines) {
  for (auto& rank : m_ranks) {
    for (int stream = 0; stream < 2; ++stream) {
      auto& pipe = rank.pipes[stream];
      if (pipe && pipe->is_open()) {
        // A last line without its newline is passed on as at the end of the stream.
        if (finish_lines && rank.output) rank.output->on_eof(stream == 0 ? Stream::out : Stream::err);
        boost::system::error_code ignored;
        pipe->close(ignored);
        pipe_closed();
      }
    }
  }
}

size_t WorkerGroup::running() const {
  size_t n = 0;
  for (const auto& rank : m_ranks) n += rank.exit ? 0 : 1;
  return n;
}

std::optional<double> WorkerGroup::cpu_seconds(size_t index) const {
  return group_cpu_seconds(pid(index));  // each rank leads a process group of its own
}

}  // namespace dlrun::launcher
