#include "dlrun/launcher/free_port.hpp"

#include <arpa/inet.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <sys/file.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstring>
#include <ctime>
#include <sstream>

#include <fmt/format.h>

#include "dlrun/error.hpp"
#include "dlrun/launcher/process.hpp"
#include "dlrun/launcher/run_dir.hpp"

namespace dlrun::launcher {
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

bool claim_port(const std::string& claims, int port, double now) {
  const int fd = ::open(claims.c_str(), O_RDWR | O_CREAT | O_NOFOLLOW | O_CLOEXEC, 0600);
  if (fd < 0) return true;
  struct stat st {};
  if (::fstat(fd, &st) != 0 || !S_ISREG(st.st_mode) || st.st_uid != ::geteuid() || ::flock(fd, LOCK_EX) != 0) {
    ::close(fd);
    return true;
  }
  // The last minute's claims, a few lines: read whole, kept if young, rewritten with ours.
  std::string text, kept;
  char buffer[4096];
  for (ssize_t n; (n = ::read(fd, buffer, sizeof buffer)) > 0 && text.size() < (1 << 20);) text.append(buffer, n);
  bool taken = false;
  std::istringstream lines(text);
  for (std::string line; std::getline(lines, line);) {
    int claimed = 0;
    double at = 0;
    if (std::sscanf(line.c_str(), "%d %lf", &claimed, &at) != 2 || now - at > k_port_claim_seconds) continue;
    taken = taken || claimed == port;
    kept += line + "\n";
  }
  if (!taken) kept += fmt::format("{} {:.0f}\n", port, now);
  const bool written = ::ftruncate(fd, 0) == 0 && ::pwrite(fd, kept.data(), kept.size(), 0) ==
                                                     static_cast<ssize_t>(kept.size());
  ::close(fd);  // and the lock with it
  return !taken || !written;
}

std::string port_claims_file() { return dlrun_home(current_environment()) + "/port-claims"; }

int pick_free_port(const std::string& address, const std::string& claims) {
  constexpr int k_attempts = 32;
  int port = -1;
  for (int attempt = 0; attempt < k_attempts; ++attempt) {
    port = try_bind(address, 0);
    if (port < 0) throw SystemError(fmt::format("cannot find a free TCP port on {}", address), -port);
    if (claims.empty() || claim_port(claims, port, static_cast<double>(std::time(nullptr)))) return port;
  }
  return port;  // every pick claimed: the kernel's last one
}

void ensure_local_address(const std::string& address) {
  if (try_bind(address, 0) != -EADDRNOTAVAIL) return;
  throw ConfigError(fmt::format("--master-addr {}: not an address of this machine, where the ranks meet (leave it "
                                "out for 127.0.0.1, or give one of this machine's own addresses)",
                                address));
}

void ensure_port_free(const std::string& address, int port) {
  if (port < 1 || port > 65535) {
    throw ConfigError(fmt::format("--master-port {}: not a TCP port (1-65535)", port));
  }
  int result = try_bind(address, port);
  // Rank 0's store (torch's TCPStore, the runtime's) listens on every address of the machine:
  // a program listening on the port at another one (127.0.0.2, the LAN's) is in its way too.
  if (result >= 0 && try_bind("0.0.0.0", port) == -EADDRINUSE) {
    throw ConfigError(fmt::format(
        "--master-port {}: port is already in use on another address of this machine (rank 0 listens on all of "
        "them); choose another or leave out --master-port to let dlrun pick a free one",
        port));
  }
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
