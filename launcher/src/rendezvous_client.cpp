#include <arpa/inet.h>
#include <netdb.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <signal.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cstring>

#include <fmt/format.h>

#include "dlrun/error.hpp"
#include "dlrun/launcher/rendezvous.hpp"
#include "dlrun/launcher/text.hpp"

namespace dlrun::launcher {

RendezvousClient::~RendezvousClient() {
  m_closing = true;
  if (m_fd >= 0) ::shutdown(m_fd, SHUT_RDWR);
  if (m_watcher.joinable()) m_watcher.join();
  if (m_fd >= 0) ::close(m_fd);
}

void RendezvousClient::connect(const std::string& host, int port, double timeout_seconds) {
  addrinfo hints{};
  hints.ai_family = AF_INET;
  hints.ai_socktype = SOCK_STREAM;
  addrinfo* result = nullptr;
  if (int rc = ::getaddrinfo(host.c_str(), std::to_string(port).c_str(), &hints, &result); rc != 0) {
    throw Error(fmt::format("rendezvous {}:{}: cannot resolve {}: {}", host, port, host, ::gai_strerror(rc)));
  }
  m_host = host;
  m_port = port;
  auto deadline = std::chrono::steady_clock::now() + std::chrono::duration<double>(timeout_seconds);
  std::string last_error = "timed out";
  while (std::chrono::steady_clock::now() < deadline) {
    int fd = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    if (::connect(fd, result->ai_addr, result->ai_addrlen) == 0) {
      int one = 1;
      ::setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
      m_fd = fd;
      ::freeaddrinfo(result);
      return;
    }
    last_error = std::strerror(errno);
    ::close(fd);
    ::usleep(100 * 1000);
  }
  ::freeaddrinfo(result);
  throw Error(fmt::format("cannot reach the launcher's rendezvous at {}:{}: {}", host, port, last_error));
}

std::string RendezvousClient::local_address() const {
  sockaddr_in addr{};
  socklen_t len = sizeof addr;
  ::getsockname(m_fd, reinterpret_cast<sockaddr*>(&addr), &len);
  char text[INET_ADDRSTRLEN] = "127.0.0.1";
  ::inet_ntop(AF_INET, &addr.sin_addr, text, sizeof text);
  return text;
}

std::string RendezvousClient::read_line(double timeout_seconds) {
  auto deadline = std::chrono::steady_clock::now() + std::chrono::duration<double>(timeout_seconds);
  while (true) {
    size_t newline = m_buffer.find('\n');
    if (newline != std::string::npos) {
      std::string line = m_buffer.substr(0, newline);
      m_buffer.erase(0, newline + 1);
      return line;
    }
    auto left = std::chrono::duration_cast<std::chrono::milliseconds>(deadline - std::chrono::steady_clock::now());
    if (left.count() <= 0) return "TIMEOUT";
    pollfd p{m_fd, POLLIN, 0};
    if (::poll(&p, 1, static_cast<int>(std::min<long>(left.count(), 1000))) <= 0) continue;
    char chunk[512];
    ssize_t n = ::recv(m_fd, chunk, sizeof chunk, 0);
    if (n <= 0) return "EOF";
    m_buffer.append(chunk, static_cast<size_t>(n));
  }
}

void RendezvousClient::send_join(const std::string& line) {
  if (::send(m_fd, line.data(), line.size(), MSG_NOSIGNAL) != static_cast<ssize_t>(line.size())) {
    throw Error(fmt::format("rendezvous: cannot send the join: {}", std::strerror(errno)));
  }
}

Assignment RendezvousClient::join(const JoinRequest& request, double timeout_seconds) {
  using clock = std::chrono::steady_clock;
  const auto deadline = clock::now() + std::chrono::duration<double>(timeout_seconds);
  const auto seconds_left = [&] { return std::chrono::duration<double>(deadline - clock::now()).count(); };
  const std::string line = format_join(request);
  send_join(line);
  while (true) {
    std::string reply = read_line(std::max(seconds_left(), 0.0));
    if (reply == "HB") continue;
    if (auto a = parse_assignment(reply)) return *a;
    if (reply.rfind("BUSY ", 0) == 0 && seconds_left() > k_busy_retry_seconds) {
      // Closed for a limit on connections that had not joined (a crowd, maybe a flood):
      // this agent's place was taken, not refused. Again, on a new connection.
      ::usleep(static_cast<useconds_t>(k_busy_retry_seconds * 1e6));
      ::close(m_fd);
      m_fd = -1;
      m_buffer.clear();
      connect(m_host, m_port, std::max(seconds_left(), 0.1));
      send_join(line);
      continue;
    }
    if (reply.rfind("BUSY ", 0) == 0 || reply.rfind("REFUSED ", 0) == 0) {
      throw ConfigError(fmt::format("the launcher's rendezvous refused this agent: {}",
                                    reply.substr(reply.find(' ') + 1)));
    }
    if (reply == "EOF") throw Error("the launcher closed the rendezvous before every host had joined");
    if (reply == "TIMEOUT") throw Error(fmt::format("no rendezvous assignment within {:g} s", timeout_seconds));
  }
}

void RendezvousClient::watch(std::function<void(int)> on_stop) {
  m_watcher = std::thread([this, on_stop = std::move(on_stop)] {
    while (!m_closing) {
      std::string line = read_line(k_silence_limit);
      if (m_closing) return;
      if (line == "HB") continue;
      if (line.rfind("SIGNAL ", 0) == 0) {
        auto sig = parse_int(line.substr(7));
        on_stop(sig && *sig > 0 ? *sig : SIGTERM);
        continue;  // further signals (a second Ctrl-C) are passed on too
      }
      if (line == "EOF" || line == "TIMEOUT") {
        on_stop(SIGTERM);
        return;
      }
    }
  });
}

void RendezvousClient::report_end(int code) {
  if (m_fd < 0) return;
  const std::string line = fmt::format("END {}\n", code);
  ssize_t ignored = ::send(m_fd, line.data(), line.size(), MSG_NOSIGNAL);  // a launcher gone has no use for it
  (void)ignored;
}

}  // namespace dlrun::launcher
