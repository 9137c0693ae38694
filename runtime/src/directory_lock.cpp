#include "directory_lock.hpp"

#include <fcntl.h>
#include <sys/file.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <mutex>
#include <set>
#include <string>

#include <fmt/format.h>

#include "dlrun/runtime_errors.hpp"

namespace dlrun::runtime {

void lock_checkpoint_directory(const std::filesystem::path& dir) {
  static std::mutex mutex;
  static std::set<std::string> held;  // by this process, for its lifetime
  std::error_code ec;
  const std::string key = std::filesystem::weakly_canonical(dir, ec).string();
  std::lock_guard lock(mutex);
  if (held.count(key)) return;
  const std::string path = (dir / ".lock").string();
  const int fd = ::open(path.c_str(), O_RDWR | O_CREAT | O_CLOEXEC, 0644);
  if (fd < 0) {
    throw CheckpointError(fmt::format("cannot open {}: {}", path, std::strerror(errno)));
  }
  if (::flock(fd, LOCK_EX | LOCK_NB) != 0) {
    const int error = errno;
    if (error != EWOULDBLOCK) {  // no locks on this file system: as before
      ::close(fd);
      held.insert(key);
      return;
    }
    char buffer[32] = {};
    const ssize_t n = ::pread(fd, buffer, sizeof buffer - 1, 0);
    ::close(fd);
    const std::string holder = n > 0 ? std::string(buffer, static_cast<size_t>(n)) : std::string("?");
    throw CheckpointError(fmt::format(
        "the checkpoint directory {} is in use by another run (process {}): two runs that save into one "
        "directory resume from each other's checkpoints; give this one a directory of its own (job.toml's "
        "checkpoint_dir, --run-dir), or wait for that run to end",
        dir.string(), holder.substr(0, holder.find_first_of("\n "))));
  }
  // Who holds it, for the message above; the lock is what counts.
  const std::string pid = std::to_string(::getpid()) + "\n";
  if (::ftruncate(fd, 0) == 0) {
    [[maybe_unused]] const ssize_t written = ::pwrite(fd, pid.data(), pid.size(), 0);
  }
  held.insert(key);  // fd stays open, and the lock held, until the process ends
}

}  // namespace dlrun::runtime
