#include "dlrun/launcher/exit_status.hpp"

#include <sys/wait.h>

#include <csignal>
#include <cstring>

#include <fmt/format.h>

#include "dlrun/protocol.hpp"

namespace dlrun::launcher {

ExitStatus ExitStatus::from_wait_status(int wait_status) {
  if (WIFSIGNALED(wait_status)) return killed(WTERMSIG(wait_status));
  if (WIFEXITED(wait_status)) return exited(WEXITSTATUS(wait_status));
  return exited(exit_code::k_internal);
}

int ExitStatus::shell_code() const { return signaled ? exit_code::k_signal_base + signal : code; }

std::string ExitStatus::describe() const {
  if (signaled) return fmt::format("was killed by signal {} ({})", signal, signal_name(signal));
  return fmt::format("exited with code {}", code);
}

std::string signal_name(int signal) {
  const char* abbrev = sigabbrev_np(signal);
  if (abbrev != nullptr) return fmt::format("SIG{}", abbrev);
  return fmt::format("signal {}", signal);
}

}  // namespace dlrun::launcher
