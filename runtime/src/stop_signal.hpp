#pragma once
// Turns SIGTERM, SIGINT and SIGUSR1 into a stop request that the training loop polls. The
// handler only stores to a volatile sig_atomic_t (async-signal-safe); a second SIGTERM/SIGINT
// takes its default action at once (a second Ctrl-C ends a script run on its own).
// The flag is process-wide; install() is idempotent. Ranks agree on it through
// StopVote (data_parallel.cpp / context.cpp), never by reading each other's flags.

#include <signal.h>

namespace dlrun::runtime::stop_signal {

// Installs the handlers (once per process).
void install();
// True once any of the signals arrived (or request() was called).
bool pending();
// For tests and for programs that want to stop on their own condition.
void request();
// Clears the flag (tests; a program that handled a stop and goes on).
void clear();

// While it lives, SIGTERM and SIGINT take their default action (the process ends at once),
// whatever handler was set (the stop handlers above, Python's KeyboardInterrupt): for the
// rendezvous, where a rank has nothing to save and may wait long for a peer that will not
// come, which a stop request would not interrupt. The earlier handlers come back after it.
class DefaultActionScope {
 public:
  DefaultActionScope();
  ~DefaultActionScope();
  DefaultActionScope(const DefaultActionScope&) = delete;
  DefaultActionScope& operator=(const DefaultActionScope&) = delete;

 private:
  struct sigaction m_old[2];
};

}  // namespace dlrun::runtime::stop_signal
