#include "dlrun/launcher/fd_io.hpp"

#include <fcntl.h>
#include <poll.h>
#include <unistd.h>

#include <cerrno>

namespace dlrun::launcher {

bool write_all(int fd, std::string_view data) {
  while (!data.empty()) {
    ssize_t n = ::write(fd, data.data(), data.size());
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) return false;
    data.remove_prefix(static_cast<size_t>(n));
  }
  return true;
}

bool reader_gone(int fd) {
  pollfd entry{fd, 0, 0};  // no events asked for: POLLERR and POLLHUP come anyway
  int n;
  do {
    n = ::poll(&entry, 1, 0);
  } while (n < 0 && errno == EINTR);
  return n == 1 && (entry.revents & (POLLERR | POLLHUP)) != 0;
}

std::string read_all(int fd) {
  std::string text;
  char buffer[8192];
  for (;;) {
    ssize_t n = ::read(fd, buffer, sizeof buffer);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) break;
    text.append(buffer, static_cast<size_t>(n));
  }
  return text;
}

std::optional<std::string> read_file(const std::string& path) {
  int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) return std::nullopt;
  std::string text = read_all(fd);
  ::close(fd);
  return text;
}

}  // namespace dlrun::launcher
