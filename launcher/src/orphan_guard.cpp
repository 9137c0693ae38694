#include "dlrun/launcher/orphan_guard.hpp"

#include <fcntl.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <cstdint>
#include <cstring>
#include <set>

#include <fmt/format.h>

#include "dlrun/error.hpp"
#include "dlrun/launcher/escaped_processes.hpp"
#include "dlrun/log.hpp"

namespace dlrun::launcher {
namespace {

constexpr char k_watch = 'W';
constexpr char k_forget = 'F';
constexpr char k_release = 'Q';

struct Message {
  char op;
  int32_t pgid;
} __attribute__((packed));

bool read_full(int fd, void* data, size_t size) {
  auto* p = static_cast<char*>(data);
  while (size > 0) {
    ssize_t n = ::read(fd, p, size);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) return false;
    p += n;
    size -= static_cast<size_t>(n);
  }
  return true;
}

[[noreturn]] void guard_main(int fd, const std::string& token) {
  ::setpgid(0, 0);
  for (int sig : {SIGINT, SIGTERM, SIGHUP, SIGQUIT, SIGTSTP, SIGTTIN, SIGTTOU, SIGPIPE}) {
    ::signal(sig, SIG_IGN);
  }
  // Hold nothing of dlrun's: a reader of dlrun's stdout must see EOF when dlrun ends.
  int null_fd = ::open("/dev/null", O_RDWR);
  for (int std_fd : {STDIN_FILENO, STDOUT_FILENO, STDERR_FILENO}) ::dup2(null_fd, std_fd);
  for (int other = 3; other < 1024; ++other) {
    if (other != fd) ::close(other);
  }
  std::set<int32_t> groups;
  Message message;
  while (read_full(fd, &message, sizeof message)) {
    if (message.op == k_watch) groups.insert(message.pgid);
    if (message.op == k_forget) groups.erase(message.pgid);
    if (message.op == k_release) ::_exit(0);
  }
  for (int32_t pgid : groups) ::kill(-pgid, SIGKILL);
  kill_processes_with_token(token);
  ::_exit(0);
}

}  // namespace

void OrphanGuard::start(const std::string& token) {
  int fds[2];
  if (::pipe2(fds, O_CLOEXEC) != 0) throw SpawnError(fmt::format("pipe: {}", std::strerror(errno)));
  pid_t pid = ::fork();
  if (pid < 0) {
    int e = errno;
    ::close(fds[0]);
    ::close(fds[1]);
    throw SpawnError(fmt::format("cannot start the orphan guard: fork: {}", std::strerror(e)));
  }
  if (pid == 0) {
    ::close(fds[1]);
    guard_main(fds[0], token);
  }
  ::close(fds[0]);
  m_fd = fds[1];
  m_pid = pid;
}

void OrphanGuard::send(char op, pid_t process_group) {
  if (m_fd < 0) return;
  Message message{op, static_cast<int32_t>(process_group)};
  // 5 bytes < PIPE_BUF: written whole or not at all.
  ssize_t n;
  do {
    n = ::write(m_fd, &message, sizeof message);
  } while (n < 0 && errno == EINTR);
  if (n != static_cast<ssize_t>(sizeof message)) {
    log::warn("orphan guard is gone; ranks may outlive dlrun if it is killed");
    ::close(m_fd);
    m_fd = -1;
  }
}

void OrphanGuard::watch(pid_t process_group) { send(k_watch, process_group); }

void OrphanGuard::forget(pid_t process_group) { send(k_forget, process_group); }

void OrphanGuard::release() {
  if (m_fd < 0) return;
  send(k_release, 0);
  if (m_fd >= 0) ::close(m_fd);
  m_fd = -1;
  if (m_pid > 0) {
    int status;
    while (::waitpid(m_pid, &status, 0) < 0 && errno == EINTR) {
    }
  }
  m_pid = -1;
}

OrphanGuard::~OrphanGuard() { release(); }

}  // namespace dlrun::launcher
