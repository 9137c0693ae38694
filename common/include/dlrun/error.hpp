#pragma once
// The exceptions of dlrun's launcher and runtime (the runtime's own are in
// runtime_errors.hpp). Each message says what failed, on what input and what to do; the CLI
// catches once at the top, prints `dlrun: error: <message>` and exits with exit_code(). The
// taxonomy is written up in docs/errors.md. Part of dlrun_common (common/): the launcher and
// the runtime share it.

#include <stdexcept>
#include <string>

#include "dlrun/protocol.hpp"

namespace dlrun {

class Error : public std::runtime_error {
 public:
  explicit Error(const std::string& message, int exit_code = exit_code::k_internal)
      : std::runtime_error(message), m_exit_code(exit_code) {}
  int exit_code() const { return m_exit_code; }

 private:
  int m_exit_code;
};

// Bad command line, job file or environment: nothing was started. Exit code 2.
class ConfigError : public Error {
 public:
  explicit ConfigError(const std::string& message) : Error(message, exit_code::k_usage) {}
};

// A process could not be started (fork, exec, pipes).
class SpawnError : public Error {
 public:
  explicit SpawnError(const std::string& message) : Error(message, exit_code::k_internal) {}
};

// A system call on the launcher's side failed (files, sockets, signals).
class SystemError : public Error {
 public:
  SystemError(const std::string& what, int err);
};

}  // namespace dlrun
