#include "dlrun/launcher/fd_io.hpp"

#include <fcntl.h>
#include <poll.h>
#include <unistd.h>

#include <fmt/format.h>

#include <cerrno>
#include <cstdio>
#include <cstring>

#include "dlrun/error.hpp"

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

namespace {
bool disk_full(int error) { return error == ENOSPC || error == EDQUOT || error == EFBIG; }

// Writes what it can; the count written. -1: an error other than a full disk (errno).
ssize_t write_until_full(int fd, std::string_view data, int& error) {
  size_t done = 0;
  while (done < data.size()) {
    const ssize_t n = ::write(fd, data.data() + done, data.size() - done);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) {
      error = n == 0 ? ENOSPC : errno;
      return disk_full(error) ? static_cast<ssize_t>(done) : -1;
    }
    done += static_cast<size_t>(n);
  }
  error = 0;
  return static_cast<ssize_t>(done);
}
}  // namespace

bool write_log_text(int fd, std::string_view data, LogGap& gap) {
  if (data.empty() && gap.lost == 0) return true;
  int error = 0;
  if (gap.lost > 0) {
    const std::string marker = fmt::format("{}[dlrun: {} bytes of output lost here: {}]\n", gap.mid_line ? "\n" : "",
                                           gap.lost, std::strerror(gap.error));
    const ssize_t n = write_until_full(fd, marker, error);
    if (n < 0) return false;
    if (static_cast<size_t>(n) < marker.size()) {  // still full
      if (n > 0) gap.mid_line = marker[static_cast<size_t>(n) - 1] != '\n';
      gap.lost += data.size();
      return true;
    }
    gap.lost = 0;
    gap.mid_line = false;
  }
  if (data.empty()) return true;
  const ssize_t n = write_until_full(fd, data, error);
  if (n < 0) return false;
  if (n > 0) gap.mid_line = data[static_cast<size_t>(n) - 1] != '\n';
  if (static_cast<size_t>(n) < data.size()) {
    gap.lost += data.size() - static_cast<size_t>(n);
    gap.error = error;
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

void write_file_atomically(const std::string& path, std::string_view text) {
  const std::string temp = fmt::format("{}.tmp.{}", path, ::getpid());
  // Made new, never through a link put there (a file of the user's the write would truncate).
  ::unlink(temp.c_str());
  int fd = ::open(temp.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, 0644);
  if (fd < 0) throw SystemError("cannot write " + path, errno);
  bool ok = write_all(fd, text);
  int error = errno;
  if (::close(fd) != 0 && ok) {
    ok = false;
    error = errno;
  }
  if (ok && ::rename(temp.c_str(), path.c_str()) != 0) {
    ::unlink(temp.c_str());
    throw SystemError("cannot write " + path, errno);
  }
  if (!ok) {
    ::unlink(temp.c_str());
    throw SystemError("cannot write " + path, error);
  }
}

}  // namespace dlrun::launcher
