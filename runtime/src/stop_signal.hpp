#pragma once
// Turns SIGTERM, SIGINT, SIGHUP and SIGUSR1 into a stop request that the training loop polls. The
// handler only stores to a volatile sig_atomic_t (async-signal-safe); a second SIGTERM/SIGINT/SIGHUP
// takes its default action at once (a second Ctrl-C ends a script run on its own), and so does
// the first one before the program ever asked for a stop request (mark_asked()).
// The flag is process-wide. Ranks agree on it through
// StopVote (data_parallel.cpp / context.cpp), never by reading each other's flags.

#include <signal.h>

namespace dlrun::runtime::stop_signal {

// Installs the handlers, unless they are in place already (a second call keeps the handlers
// the first one found, to chain to).
void install();
// True once any of the signals arrived (or request() was called).
bool pending();
// The program asks for stop requests (Context::stop_requested(), stop_pending(), poll_stop()):
// until it first does, SIGTERM, SIGINT and SIGHUP take their default action at once, as a second one
// does (a program that never asks would only be killed at the end of the launcher's grace).
void mark_asked(bool asked = true);  // false: for tests
// For tests and for programs that want to stop on their own condition.
void request();
// Clears the flag (tests; a program that handled a stop and goes on).
void clear();

// While it lives, SIGTERM, SIGINT and SIGHUP take their default action (the process ends at once),
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
  struct sigaction m_old[3];
};

}  // namespace dlrun::runtime::stop_signal
