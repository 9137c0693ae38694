#include "port_probe.hpp"

#include <fcntl.h>
#include <netdb.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <thread>

namespace dlrun::runtime {
namespace {

constexpr auto k_retry = std::chrono::milliseconds(5);
constexpr int k_connect_wait_ms = 200;  // per attempt, for a host that does not answer at all

bool try_connect(const addrinfo& address) {
  const int fd = ::socket(address.ai_family, address.ai_socktype | SOCK_NONBLOCK | SOCK_CLOEXEC,
                          address.ai_protocol);
  if (fd < 0) return false;
  bool connected = ::connect(fd, address.ai_addr, address.ai_addrlen) == 0;
  if (!connected && errno == EINPROGRESS) {
    pollfd waiting{fd, POLLOUT, 0};
    if (::poll(&waiting, 1, k_connect_wait_ms) == 1) {
      int error = 0;
      socklen_t size = sizeof(error);
      connected = ::getsockopt(fd, SOL_SOCKET, SO_ERROR, &error, &size) == 0 && error == 0;
    }
  }
  ::close(fd);
  return connected;
}

}  // namespace

bool wait_until_listening(const std::string& host, uint16_t port,
                          std::chrono::milliseconds timeout) {
  const auto deadline = std::chrono::steady_clock::now() + timeout;
  addrinfo hints{};
  hints.ai_socktype = SOCK_STREAM;
  for (;;) {
    addrinfo* found = nullptr;
    if (::getaddrinfo(host.c_str(), std::to_string(port).c_str(), &hints, &found) == 0) {
      bool up = false;
      for (addrinfo* a = found; a && !up; a = a->ai_next) up = try_connect(*a);
      ::freeaddrinfo(found);
      if (up) return true;
    }
    if (std::chrono::steady_clock::now() + k_retry > deadline) return false;
    std::this_thread::sleep_for(k_retry);
  }
}

}  // namespace dlrun::runtime
