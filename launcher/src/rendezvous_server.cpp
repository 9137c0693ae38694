#include <arpa/inet.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cstring>
#include <limits>
#include <thread>

#include <fmt/format.h>

#include "dlrun/error.hpp"
#include "dlrun/launcher/rendezvous.hpp"
#include "dlrun/launcher/text.hpp"

namespace dlrun::launcher {
namespace {

double now() {
  using namespace std::chrono;
  return duration<double>(steady_clock::now().time_since_epoch()).count();
}

void send_line(int fd, const std::string& line) {
  // A blocking socket (an assignment with its plan is a few KiB); a peer that is gone is
  // noticed by poll.
  size_t sent = 0;
  while (sent < line.size()) {
    ssize_t n = ::send(fd, line.data() + sent, line.size() - sent, MSG_NOSIGNAL);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) return;
    sent += static_cast<size_t>(n);
  }
}

std::string peer_of(int fd) {
  sockaddr_in peer{};
  socklen_t len = sizeof peer;
  char text[INET_ADDRSTRLEN] = "?";
  if (::getpeername(fd, reinterpret_cast<sockaddr*>(&peer), &len) == 0) {
    ::inet_ntop(AF_INET, &peer.sin_addr, text, sizeof text);
  }
  return text;
}

std::uint64_t descriptor_limit() {
  rlimit limit{};
  if (::getrlimit(RLIMIT_NOFILE, &limit) != 0 || limit.rlim_cur == RLIM_INFINITY) {
    return std::numeric_limits<std::uint64_t>::max();
  }
  return limit.rlim_cur;
}

// A joined agent sends nothing more; this only bounds what a confused one could make us hold.
constexpr std::size_t k_max_joined_buffer = 4096;

}  // namespace

RendezvousServer::RendezvousServer(std::string secret, std::vector<int> slots, std::vector<std::string> host_names,
                                   double join_timeout_seconds, RendezvousLimits limits)
    : m_secret(std::move(secret)),
      m_slots(std::move(slots)),
      m_names(std::move(host_names)),
      m_join_timeout(join_timeout_seconds),
      m_limits(limits),
      m_refusals(limits.refusals_logged, limits.refusal_interval_seconds) {}

RendezvousServer::~RendezvousServer() { stop(); }

void RendezvousServer::start(const std::string& bind_address, int port) {
  // Non-blocking: accept_new() takes what is queued and stops at EAGAIN.
  m_listen_fd = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0);
  if (m_listen_fd < 0) throw SystemError("rendezvous: socket", errno);
  int one = 1;
  ::setsockopt(m_listen_fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one);
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_port = htons(static_cast<uint16_t>(port));
  if (::inet_pton(AF_INET, bind_address.c_str(), &addr.sin_addr) != 1) addr.sin_addr.s_addr = htonl(INADDR_ANY);
  if (::bind(m_listen_fd, reinterpret_cast<sockaddr*>(&addr), sizeof addr) != 0 || ::listen(m_listen_fd, 128) != 0) {
    throw SystemError(fmt::format("rendezvous: cannot listen on {}:{}", bind_address, port), errno);
  }
  socklen_t len = sizeof addr;
  ::getsockname(m_listen_fd, reinterpret_cast<sockaddr*>(&addr), &len);
  m_port = ntohs(addr.sin_port);
  if (::pipe2(m_wake, O_CLOEXEC) != 0) throw SystemError("rendezvous: pipe", errno);
  m_pending = PendingConnections(pending_limit(m_limits.max_pending, descriptor_limit()), m_limits.first_line_seconds);
  m_round_started = now();
  m_thread = std::thread([this] { serve(); });
}

void RendezvousServer::on_failure(std::function<void(const std::string&)> callback) {
  std::lock_guard lock(m_mutex);
  m_on_failure = std::move(callback);
}

void RendezvousServer::on_refused(std::function<void(const std::string&)> callback) {
  std::lock_guard lock(m_mutex);
  m_on_refused = std::move(callback);
}

bool RendezvousServer::joined(int node) {
  std::lock_guard lock(m_mutex);
  return m_joins.count(node) > 0;
}

std::optional<int> RendezvousServer::reported_end(int node, double wait_seconds) {
  const double until = now() + wait_seconds;
  for (;;) {
    {
      std::lock_guard lock(m_mutex);
      if (auto it = m_ends.find(node); it != m_ends.end()) return it->second;
    }
    if (now() >= until) return std::nullopt;
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
}

void RendezvousServer::new_round(int round) {
  std::lock_guard lock(m_mutex);
  m_round = round;
  m_round_started = now();
  m_round_complete = false;
  m_round_failed = false;
  m_joins.clear();
  m_ends.clear();
  m_signals_to_pass.clear();  // the last round's: its ranks are gone
  for (auto& [fd, node] : m_node_of_fd) ::shutdown(fd, SHUT_RDWR);  // the old round's agents
}

bool RendezvousServer::broadcast_signal(int signal) {
  std::lock_guard lock(m_mutex);
  if (m_round_failed) {
    for (auto& [fd, node] : m_node_of_fd) ::shutdown(fd, SHUT_RDWR);
    return false;
  }
  // Agents that have not all joined wait for their assignments: they get it right behind them
  // (a stop while the hosts start up was lost, and the ranks started after it).
  if (!m_round_complete) {
    m_signals_to_pass.push_back(signal);
    return true;
  }
  for (auto& [fd, node] : m_node_of_fd) send_line(fd, fmt::format("SIGNAL {}\n", signal));
  return true;
}

void RendezvousServer::pass_signal(int signal) {
  std::lock_guard lock(m_mutex);
  if (!m_round_complete) {
    m_signals_to_pass.push_back(signal);
    return;
  }
  for (auto& [fd, node] : m_node_of_fd) send_line(fd, fmt::format("SIGNAL {}\n", signal));
}

void RendezvousServer::stop() {
  if (m_stopping.exchange(true)) return;
  if (m_wake[1] >= 0) {
    char c = 'x';
    ssize_t ignored = ::write(m_wake[1], &c, 1);
    (void)ignored;
  }
  if (m_thread.joinable()) m_thread.join();
  for (auto& [fd, buffer] : m_buffers) ::close(fd);
  m_buffers.clear();
  for (int fd : {m_listen_fd, m_wake[0], m_wake[1]}) {
    if (fd >= 0) ::close(fd);
  }
  m_listen_fd = m_wake[0] = m_wake[1] = -1;
}

void RendezvousServer::drop(int fd) {
  m_pending.remove(fd);
  m_node_of_fd.erase(fd);
  m_buffers.erase(fd);
  ::close(fd);
}

void RendezvousServer::set_plans(std::vector<std::string> plans) {
  std::lock_guard<std::mutex> lock(m_mutex);
  m_plans = std::move(plans);
}

void RendezvousServer::complete_round_locked() {
  const JoinRequest& first = m_joins.at(0);
  int first_rank = 0;
  int world = 0;
  for (int s : m_slots) world += s;
  for (auto& [fd, node] : m_node_of_fd) {
    int rank = 0;
    for (int n = 0; n < node; ++n) rank += m_slots[static_cast<size_t>(n)];
    Assignment a{node, rank, world, static_cast<int>(m_slots.size()), first.address, first.port,
                 static_cast<size_t>(node) < m_plans.size() ? m_plans[static_cast<size_t>(node)] : std::string()};
    send_line(fd, format_assignment(a));
    for (int signal : m_signals_to_pass) send_line(fd, fmt::format("SIGNAL {}\n", signal));
    (void)first_rank;
  }
  m_signals_to_pass.clear();
  m_round_complete = true;
}

void RendezvousServer::refuse(int fd, const std::string& reason, bool busy) {
  std::string line = (busy ? "BUSY " : "REFUSED ") + reason + "\n";
  // Never blocks: a peer that does not read its refusal is not waited for.
  ssize_t ignored = ::send(fd, line.data(), line.size(), MSG_NOSIGNAL | MSG_DONTWAIT);
  (void)ignored;
  if (m_refusals.admit(now()) && m_on_refused) {
    m_on_refused(fmt::format("refused an agent from {}: {}", peer_of(fd), reason));
  }
  drop(fd);
}

void RendezvousServer::handle_line(int fd, const std::string& line) {
  if (auto node = m_node_of_fd.find(fd); node != m_node_of_fd.end() && line.rfind("END ", 0) == 0) {
    if (auto code = parse_int(line.substr(4))) m_ends[node->second] = *code;
    return;
  }
  auto join = parse_join(line);
  std::string refusal;
  if (!join) {
    refusal = "not a dlrun agent";
  } else if (!secrets_equal(m_secret, join->secret)) {
    refusal = "wrong job secret";
  } else if (join->round != m_round) {
    refusal = fmt::format("stale round {} (the job is at round {})", join->round, m_round);
  } else if (join->node < 0 || join->node >= static_cast<int>(m_slots.size())) {
    refusal = fmt::format("no node {} in this job", join->node);
  } else if (m_joins.count(join->node)) {
    refusal = fmt::format("node {} has already joined", join->node);
  }
  if (!refusal.empty()) {
    refuse(fd, refusal);
    return;
  }
  m_pending.remove(fd);
  m_joins[join->node] = *join;
  m_node_of_fd[fd] = join->node;
  if (m_joins.size() == m_slots.size()) complete_round_locked();
}

void RendezvousServer::read_from(int fd) {
  char chunk[512];
  ssize_t n = ::recv(fd, chunk, sizeof chunk, MSG_DONTWAIT);
  if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK || errno == EINTR)) return;
  if (n <= 0) {
    drop(fd);
    return;
  }
  std::string& buffer = m_buffers[fd];
  buffer.append(chunk, static_cast<size_t>(n));
  if (m_pending.contains(fd) && buffer.size() > m_limits.max_line_bytes) {
    refuse(fd, fmt::format("a join line longer than {} bytes", m_limits.max_line_bytes));
    return;
  }
  if (buffer.size() > k_max_joined_buffer) {
    drop(fd);
    return;
  }
  size_t newline;
  while (m_buffers.count(fd) && (newline = m_buffers[fd].find('\n')) != std::string::npos) {
    std::string line = m_buffers[fd].substr(0, newline);
    m_buffers[fd].erase(0, newline + 1);
    handle_line(fd, line);
  }
}

void RendezvousServer::accept_new(double t) {
  // A few at a time, after the connections already there have been read: a join that has
  // arrived is never pushed out by newcomers of the same wakeup.
  size_t batch = std::max<size_t>(1, m_pending.limit() / 4);
  for (size_t i = 0; i < batch; ++i) {
    int fd = ::accept4(m_listen_fd, nullptr, nullptr, SOCK_CLOEXEC);
    if (fd < 0) {
      if (errno == EMFILE || errno == ENFILE || errno == ENOBUFS || errno == ENOMEM) {
        // The queued connection stays queued and the socket stays readable: without a
        // pause this loop would spin. The oldest waiting connection gives its descriptor.
        if (auto oldest = m_pending.oldest()) refuse(*oldest, "the launcher is out of file descriptors", true);
        m_accepting_from = t + m_limits.accept_pause_seconds;
      }
      return;  // EAGAIN: nothing more queued; anything else: try again on the next wakeup
    }
    int one = 1;
    ::setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
    m_buffers[fd];
    if (auto evicted = m_pending.admit(fd, t)) {
      refuse(*evicted, fmt::format("more than {} connections waiting to join", m_pending.limit()), true);
    }
  }
}

void RendezvousServer::close_silent(double t) {
  for (int fd : m_pending.expire(t)) {
    refuse(fd, fmt::format("no join line within {:g} s", m_limits.first_line_seconds), true);
  }
}

void RendezvousServer::check_round(double t) {
  if (m_round_complete || m_round_failed || t - m_round_started <= m_join_timeout) return;
  m_round_failed = true;
  std::string missing;
  for (size_t node = 0; node < m_slots.size(); ++node) {
    if (!m_joins.count(static_cast<int>(node))) {
      missing += fmt::format("{}{} (node {})", missing.empty() ? "" : ", ", m_names[node], node);
    }
  }
  if (m_on_failure) {
    m_on_failure(
        fmt::format("not every host joined the rendezvous within {:g} s; missing: {}", m_join_timeout, missing));
  }
}

void RendezvousServer::serve() {
  double last_heartbeat = now();
  while (!m_stopping) {
    std::vector<pollfd> fds = {{m_wake[0], POLLIN, 0}};
    bool accepting;
    {
      std::lock_guard lock(m_mutex);
      accepting = now() >= m_accepting_from;
      for (auto& [fd, buffer] : m_buffers) fds.push_back({fd, POLLIN, 0});
    }
    if (accepting) fds.push_back({m_listen_fd, POLLIN, 0});
    ::poll(fds.data(), fds.size(), 100);
    if (m_stopping) break;
    std::lock_guard lock(m_mutex);
    double t = now();
    for (const pollfd& p : fds) {
      if (p.revents && p.fd != m_wake[0] && p.fd != m_listen_fd && m_buffers.count(p.fd)) read_from(p.fd);
    }
    if (accepting && fds.back().revents) accept_new(t);
    close_silent(t);
    if (t - last_heartbeat >= k_heartbeat_interval) {
      for (auto& [fd, node] : m_node_of_fd) send_line(fd, "HB\n");
      last_heartbeat = t;
    }
    check_round(t);
    if (int unlogged = m_refusals.take_unlogged(t); unlogged > 0 && m_on_refused) {
      m_on_refused(fmt::format("refused {} more agent{} (only the first {} in {:g} s are logged one by one)",
                               unlogged, unlogged == 1 ? "" : "s", m_limits.refusals_logged,
                               m_limits.refusal_interval_seconds));
    }
  }
}

}  // namespace dlrun::launcher
