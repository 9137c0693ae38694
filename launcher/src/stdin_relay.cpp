#include "dlrun/launcher/stdin_relay.hpp"

#include <fcntl.h>
#include <signal.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <mutex>
#include <thread>

namespace dlrun::launcher {

struct StdinRelay::Shared {
  std::mutex mutex;
  int write_end = -1;  // of the current attempt's pipe; -1 between attempts
  bool ended = false;  // the terminal is gone: later attempts read /dev/null
  bool terminal = false;
  bool given = false;  // a file or pipe, handed on as it is
  std::shared_ptr<std::atomic<uint64_t>> chunks = std::make_shared<std::atomic<uint64_t>>(0);
};

namespace {

void close_fd(int& fd) {
  if (fd >= 0) ::close(fd);
  fd = -1;
}

// The reading thread: blocking reads of the terminal (fd 0), each chunk into the pipe of the
// attempt that runs then. Ends at the end of input; otherwise with the process.
void relay_from_terminal(std::shared_ptr<StdinRelay::Shared> shared) {
  sigset_t ttin;
  sigemptyset(&ttin);
  sigaddset(&ttin, SIGTTIN);
  ::pthread_sigmask(SIG_BLOCK, &ttin, nullptr);
  char buffer[4096];
  auto last_end = std::chrono::steady_clock::time_point{};
  for (;;) {
    const ssize_t n = ::read(STDIN_FILENO, buffer, sizeof buffer);
    if (n < 0 && errno == EINTR) continue;
    if (n < 0 && (errno == EIO || errno == EAGAIN)) {
      // In the background (or a terminal that went away for now): look again later.
      std::this_thread::sleep_for(std::chrono::milliseconds(500));
      continue;
    }
    std::lock_guard<std::mutex> lock(shared->mutex);
    if (n == 0) {
      // Ctrl-D: the end of this attempt's input (a terminal reads on after it). Ends that come
      // back at once are a terminal that hung up: nothing more will come.
      const auto now = std::chrono::steady_clock::now();
      close_fd(shared->write_end);
      if (now - last_end < std::chrono::milliseconds(50)) {
        shared->ended = true;
        return;
      }
      last_end = now;
      continue;
    }
    if (n < 0) {  // the terminal is gone (hung up): later attempts read /dev/null
      shared->ended = true;
      close_fd(shared->write_end);
      return;
    }
    // Typed while no rank reads (between attempts, a full pipe): dropped, as a terminal whose
    // reader is gone drops it.
    // Counted before rank 0 can read it: what rank 0 writes after its answer is known as such.
    shared->chunks->fetch_add(1);
    if (shared->write_end >= 0) {
      ssize_t written = ::write(shared->write_end, buffer, static_cast<size_t>(n));
      (void)written;
    }
  }
}

}  // namespace

StdinRelay::StdinRelay(bool relay_terminal) : m_shared(std::make_shared<Shared>()) {
  struct stat st {};
  if (::fstat(STDIN_FILENO, &st) != 0) return;  // closed: /dev/null
  if (!::isatty(STDIN_FILENO)) {
    m_shared->given = true;
    return;
  }
  if (!relay_terminal) return;
  m_shared->terminal = true;
  // A background read fails with EIO on this thread too (the job's), which never reads it.
  sigset_t ttin;
  sigemptyset(&ttin);
  sigaddset(&ttin, SIGTTIN);
  ::pthread_sigmask(SIG_BLOCK, &ttin, nullptr);
  std::thread(relay_from_terminal, m_shared).detach();
}

StdinRelay::~StdinRelay() {
  close_fd(m_read_end);
  std::lock_guard<std::mutex> lock(m_shared->mutex);
  close_fd(m_shared->write_end);
}

int StdinRelay::for_attempt() {
  close_fd(m_read_end);
  if (m_shared->given) return STDIN_FILENO;
  if (!m_shared->terminal) return -1;
  std::lock_guard<std::mutex> lock(m_shared->mutex);
  close_fd(m_shared->write_end);  // the last attempt's rank 0 sees the end of its input
  if (m_shared->ended) return -1;
  int fds[2];
  if (::pipe2(fds, O_CLOEXEC) != 0) return -1;
  // Never blocks the reading thread: a rank 0 that does not read loses what is typed past
  // the pipe's 64 KiB.
  ::fcntl(fds[1], F_SETFL, O_NONBLOCK);
  m_read_end = fds[0];
  m_shared->write_end = fds[1];
  return m_read_end;
}

void StdinRelay::started() { close_fd(m_read_end); }

bool StdinRelay::relays_terminal() const { return m_shared->terminal; }

std::shared_ptr<const std::atomic<uint64_t>> StdinRelay::given() const { return m_shared->chunks; }

}  // namespace dlrun::launcher
