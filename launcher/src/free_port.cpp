#include "dlrun/launcher/free_port.hpp"

#include <arpa/inet.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <ctime>
#include <filesystem>

#include <fmt/format.h>

#include "dlrun/error.hpp"

namespace dlrun::launcher {
namespace fs = std::filesystem;
namespace {

// Binds like the rendezvous server will (SO_REUSEADDR, so ports in TIME_WAIT count as
// free); returns the bound port or -errno.
int try_bind(const std::string& address, int port) {
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_port = htons(static_cast<uint16_t>(port));
  if (::inet_pton(AF_INET, address.c_str(), &addr.sin_addr) != 1) {
    // A host name or a non-local address: bind on all interfaces instead.
    addr.sin_addr.s_addr = htonl(INADDR_ANY);
  }
  int fd = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  if (fd < 0) return -errno;
  int one = 1;
  ::setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one);
  int result;
  if (::bind(fd, reinterpret_cast<sockaddr*>(&addr), sizeof addr) != 0) {
    result = -errno;
  } else {
    socklen_t len = sizeof addr;
    ::getsockname(fd, reinterpret_cast<sockaddr*>(&addr), &len);
    result = ntohs(addr.sin_port);
  }
  ::close(fd);
  return result;
}

}  // namespace

bool reserve_port(const std::string& dir, int port, double now) {
  std::error_code ec;
  fs::create_directories(dir, ec);
  if (ec) return true;
  // Stale claims go first: the directory holds the last minute's ports, not every one.
  for (auto it = fs::directory_iterator(dir, ec); !ec && it != fs::directory_iterator(); it.increment(ec)) {
    struct stat st {};
    if (::lstat(it->path().c_str(), &st) == 0 && now - static_cast<double>(st.st_mtime) > k_port_reservation_seconds) {
      ::unlink(it->path().c_str());
    }
  }
  const std::string path = fmt::format("{}/{}", dir, port);
  int fd = ::open(path.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC | O_NOFOLLOW, 0600);
  if (fd >= 0) {
    ::close(fd);
    return true;
  }
  return errno != EEXIST;  // EEXIST: a claim younger than a minute (older ones were removed above)
}

int pick_free_port(const std::string& address, const std::string& reservations) {
  constexpr int k_attempts = 32;
  int port = -1;
  for (int attempt = 0; attempt < k_attempts; ++attempt) {
    port = try_bind(address, 0);
    if (port < 0) throw SystemError(fmt::format("cannot find a free TCP port on {}", address), -port);
    if (reservations.empty() || reserve_port(reservations, port, static_cast<double>(std::time(nullptr)))) {
      return port;
    }
  }
  return port;  // every pick claimed: the kernel's last one
}

void ensure_port_free(const std::string& address, int port) {
  if (port < 1 || port > 65535) {
    throw ConfigError(fmt::format("--master-port {}: not a TCP port (1-65535)", port));
  }
  int result = try_bind(address, port);
  if (result >= 0) return;
  if (result == -EADDRINUSE) {
    throw ConfigError(fmt::format(
        "--master-port {}: port is already in use on {}; choose another or leave out "
        "--master-port to let dlrun pick a free one",
        port, address));
  }
  throw ConfigError(fmt::format("--master-port {}: cannot bind on {}: {}", port, address,
                                std::strerror(-result)));
}

}  // namespace dlrun::launcher
