#include <arpa/inet.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <cstring>

#include <fmt/format.h>

#include "dlrun/error.hpp"
#include "dlrun/launcher/rendezvous.hpp"

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

}  // namespace

RendezvousServer::RendezvousServer(std::string secret, std::vector<int> slots, std::vector<std::string> host_names,
                                   double join_timeout_seconds)
    : m_secret(std::move(secret)),
      m_slots(std::move(slots)),
      m_names(std::move(host_names)),
      m_join_timeout(join_timeout_seconds) {}

RendezvousServer::~RendezvousServer() { stop(); }

void RendezvousServer::start(const std::string& bind_address, int port) {
  m_listen_fd = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
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

void RendezvousServer::new_round(int round) {
  std::lock_guard lock(m_mutex);
  m_round = round;
  m_round_started = now();
  m_round_complete = false;
  m_round_failed = false;
  m_joins.clear();
  for (auto& [fd, node] : m_node_of_fd) ::shutdown(fd, SHUT_RDWR);  // the old round's agents
}

void RendezvousServer::broadcast_signal(int signal) {
  std::lock_guard lock(m_mutex);
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
    (void)first_rank;
  }
  m_round_complete = true;
}

void RendezvousServer::handle_line(int fd, const std::string& line) {
  auto join = parse_join(line);
  std::string refusal;
  if (!join) {
    refusal = "not a dlrun agent";
  } else if (join->secret != m_secret) {
    refusal = "wrong job secret";
  } else if (join->round != m_round) {
    refusal = fmt::format("stale round {} (the job is at round {})", join->round, m_round);
  } else if (join->node < 0 || join->node >= static_cast<int>(m_slots.size())) {
    refusal = fmt::format("no node {} in this job", join->node);
  } else if (m_joins.count(join->node)) {
    refusal = fmt::format("node {} has already joined", join->node);
  }
  if (!refusal.empty()) {
    send_line(fd, "REFUSED " + refusal + "\n");
    sockaddr_in peer{};
    socklen_t len = sizeof peer;
    ::getpeername(fd, reinterpret_cast<sockaddr*>(&peer), &len);
    char text[INET_ADDRSTRLEN] = "?";
    ::inet_ntop(AF_INET, &peer.sin_addr, text, sizeof text);
    if (m_on_refused) m_on_refused(fmt::format("refused an agent from {}: {}", text, refusal));
    drop(fd);
    return;
  }
  m_joins[join->node] = *join;
  m_node_of_fd[fd] = join->node;
  if (m_joins.size() == m_slots.size()) complete_round_locked();
}

void RendezvousServer::serve() {
  double last_heartbeat = now();
  while (!m_stopping) {
    std::vector<pollfd> fds = {{m_listen_fd, POLLIN, 0}, {m_wake[0], POLLIN, 0}};
    {
      std::lock_guard lock(m_mutex);
      for (auto& [fd, buffer] : m_buffers) fds.push_back({fd, POLLIN, 0});
    }
    ::poll(fds.data(), fds.size(), 200);
    if (m_stopping) break;
    std::lock_guard lock(m_mutex);
    if (fds[0].revents & POLLIN) {
      int fd = ::accept4(m_listen_fd, nullptr, nullptr, SOCK_CLOEXEC);
      if (fd >= 0) {
        int one = 1;
        ::setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
        m_buffers[fd];
      }
    }
    for (size_t i = 2; i < fds.size(); ++i) {
      if (!fds[i].revents) continue;
      int fd = fds[i].fd;
      char chunk[512];
      ssize_t n = ::recv(fd, chunk, sizeof chunk, 0);
      if (n <= 0) {
        drop(fd);
        continue;
      }
      std::string& buffer = m_buffers[fd];
      buffer.append(chunk, static_cast<size_t>(n));
      if (buffer.size() > 4096) {
        drop(fd);
        continue;
      }
      size_t newline;
      while (m_buffers.count(fd) && (newline = m_buffers[fd].find('\n')) != std::string::npos) {
        std::string line = m_buffers[fd].substr(0, newline);
        m_buffers[fd].erase(0, newline + 1);
        handle_line(fd, line);
      }
    }
    double t = now();
    if (t - last_heartbeat >= k_heartbeat_interval) {
      for (auto& [fd, node] : m_node_of_fd) send_line(fd, "HB\n");
      last_heartbeat = t;
    }
    if (!m_round_complete && !m_round_failed && t - m_round_started > m_join_timeout) {
      m_round_failed = true;
      std::string missing;
      for (size_t node = 0; node < m_slots.size(); ++node) {
        if (!m_joins.count(static_cast<int>(node))) {
          missing += fmt::format("{}{} (node {})", missing.empty() ? "" : ", ", m_names[node], node);
        }
      }
      if (m_on_failure) {
        m_on_failure(fmt::format("not every host joined the rendezvous within {:g} s; missing: {}", m_join_timeout,
                                 missing));
      }
    }
  }
}

}  // namespace dlrun::launcher
