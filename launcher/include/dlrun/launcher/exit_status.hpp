#pragma once
// How a process ended, from its waitpid(2) status, and the exit code dlrun passes on for
// it: the process's own code, or 128 + signal number as shells do. Pure.

#include <string>

namespace dlrun::launcher {

struct ExitStatus {
  bool signaled = false;
  int code = 0;    // exit code when !signaled
  int signal = 0;  // signal number when signaled

  static ExitStatus from_wait_status(int wait_status);
  static ExitStatus exited(int code) { return {false, code, 0}; }
  static ExitStatus killed(int signal) { return {true, 0, signal}; }

  bool success() const { return !signaled && code == 0; }
  int shell_code() const;
  // "exited with code 3", "was killed by signal 9 (SIGKILL)".
  std::string describe() const;
};

// "SIGTERM" for 15; "signal 64" for numbers without a name.
std::string signal_name(int signal);

}  // namespace dlrun::launcher
