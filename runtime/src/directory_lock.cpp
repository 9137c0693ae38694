#include "directory_lock.hpp"

#include <fcntl.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <mutex>
#include <set>
#include <string>
#include <utility>

#include "dlrun/log.hpp"

namespace dlrun::runtime {

void mark_checkpoint_directory_in_use(const std::filesystem::path& dir) {
  static std::mutex mutex;
  static std::set<std::pair<dev_t, ino_t>> marked;  // by this process, for its lifetime
  struct stat st {};
  if (::stat(dir.c_str(), &st) != 0) return;
  std::lock_guard lock(mutex);
  // One directory whatever path reaches it (a symbolic link, a bind mount): this process's own
  // lock is never taken for another's.
  if (!marked.insert({st.st_dev, st.st_ino}).second) return;
  const std::string path = (dir / ".lock").string();
  int fd = ::open(path.c_str(), O_RDWR | O_CREAT | O_CLOEXEC, 0666);  // the umask decides
  const bool writable = fd >= 0;
  if (fd < 0) fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);  // another user's: flock works read-only
  if (fd < 0) return;
  if (::flock(fd, LOCK_EX | LOCK_NB) != 0) {
    if (errno == EWOULDBLOCK) {
      char buffer[64] = {};
      const ssize_t n = ::pread(fd, buffer, sizeof buffer - 1, 0);
      std::string holder = n > 0 ? std::string(buffer, static_cast<size_t>(n)) : std::string();
      holder = holder.substr(0, holder.find('\n'));
      log::warn("the checkpoint directory {} is in use by another process{}: two runs that save into one "
                "directory resume from each other's checkpoints; give each run a directory of its own "
                "(job.toml's checkpoint_dir, --run-dir), unless that process only reads it",
                dir.string(), holder.empty() ? "" : " (" + holder + ")");
    }
    ::close(fd);  // no lock to hold (taken, or none on this file system)
    return;
  }
  if (writable) {
    char host[256] = {};
    ::gethostname(host, sizeof host - 1);
    const std::string who = "pid " + std::to_string(::getpid()) + " on " + host + "\n";
    if (::ftruncate(fd, 0) == 0) {
      [[maybe_unused]] const ssize_t written = ::pwrite(fd, who.data(), who.size(), 0);
    }
  }
  // fd stays open, and the lock held, until the process ends.
}

}  // namespace dlrun::runtime
