#pragma once
// Makes sure no rank outlives dlrun, even when dlrun is killed with SIGKILL and can run
// no code of its own. At start dlrun forks a tiny guard process (in its own process
// group, deaf to terminal signals) and keeps the write end of a pipe to it; dlrun tells it
// each rank's process group as it starts and ends. When the pipe closes without a goodbye
// (dlrun died), the guard sends SIGKILL to every process group still listed, then to every
// process whose environment carries dlrun's supervisor token (those that left their
// process group, escaped_processes.hpp), and exits.
// A rank's own parent-death signal covers the rank; the guard covers its children.
// Owned by the supervisor; not thread-safe. Protocol in docs/channels.md.

#include <sys/types.h>

#include <string>

namespace dlrun::launcher {

class OrphanGuard {
 public:
  OrphanGuard() = default;
  ~OrphanGuard();
  OrphanGuard(const OrphanGuard&) = delete;
  OrphanGuard& operator=(const OrphanGuard&) = delete;

  // Forks the guard. Call before starting any rank (the guard must hold none of their fds).
  // `token`: the DLRUN_SUPERVISOR_ID its members carry.
  void start(const std::string& token);
  bool running() const { return m_fd >= 0; }
  pid_t pid() const { return m_pid; }

  void watch(pid_t process_group);
  void forget(pid_t process_group);
  // Ends the guard without killing anything: dlrun has cleaned up itself.
  void release();

 private:
  void send(char op, pid_t process_group);
  int m_fd = -1;
  pid_t m_pid = -1;
};

}  // namespace dlrun::launcher
