#include "stop_signal.hpp"

#include <signal.h>

#include <csignal>
#include <mutex>

namespace dlrun::runtime::stop_signal {
namespace {

volatile std::sig_atomic_t g_pending = 0;
volatile std::sig_atomic_t g_count = 0;
volatile std::sig_atomic_t g_asked = 0;
// The handlers of SIGTERM, SIGINT and SIGHUP before install() (Python's KeyboardInterrupt, a
// user's own). SIGHUP is a stop as SIGTERM is: dlrun passes on the hang-up of the terminal it
// was started from (an ssh session that dropped), and a rank that died of it lost every step
// since its last checkpoint.
struct sigaction g_previous[3];

// SIGTERM's, SIGINT's or SIGHUP's handler before install().
const struct sigaction& previous_of(int signal) {
  return g_previous[signal == SIGINT ? 1 : signal == SIGHUP ? 2 : 0];
}

// Its default action, at once: it is blocked while the handler runs, so it takes effect as the
// handler returns. sigaction and raise are async-signal-safe (POSIX).
void take_default_action(int signal) {
  struct sigaction action {};
  action.sa_handler = SIG_DFL;
  sigemptyset(&action.sa_mask);
  sigaction(signal, &action, nullptr);
  raise(signal);
}

extern "C" void on_stop_signal(int signal, siginfo_t* info, void* context) {
  if (signal == SIGUSR1) {  // a stop request (a resize): never "now"
    g_pending = 1;
    return;
  }
  if (!g_asked) {
    // A program that has never asked for a stop request would not stop before the launcher's
    // SIGKILL: the first SIGINT or SIGTERM does what it did before install() (ignored, Python's
    // KeyboardInterrupt, a handler of the program's), or takes its default action; the second
    // takes its default action.
    const struct sigaction& previous = previous_of(signal);
    if (!(previous.sa_flags & SA_SIGINFO) && previous.sa_handler == SIG_IGN) return;
    g_count = g_count + 1;
    if (g_count == 1 && (previous.sa_flags & SA_SIGINFO) && previous.sa_sigaction) {
      return previous.sa_sigaction(signal, info, context);
    }
    if (g_count == 1 && !(previous.sa_flags & SA_SIGINFO) && previous.sa_handler != SIG_DFL) {
      return previous.sa_handler(signal);
    }
    return take_default_action(signal);
  }
  g_pending = 1;
  g_count = g_count + 1;
  // A second one means "now" (a second Ctrl-C).
  if (g_count >= 2) take_default_action(signal);
}

}  // namespace

void install() {
  static std::mutex mutex;
  std::lock_guard lock(mutex);
  struct sigaction current {};
  sigaction(SIGTERM, nullptr, &current);
  if ((current.sa_flags & SA_SIGINFO) && current.sa_sigaction == on_stop_signal) return;  // keep what it found
  {
    struct sigaction action {};
    action.sa_sigaction = on_stop_signal;
    sigemptyset(&action.sa_mask);
    action.sa_flags = SA_RESTART | SA_SIGINFO;
    sigaction(SIGTERM, &action, &g_previous[0]);
    sigaction(SIGINT, &action, &g_previous[1]);
    sigaction(SIGHUP, &action, &g_previous[2]);
    sigaction(SIGUSR1, &action, nullptr);
  }
}

bool pending() {
  return g_pending != 0;
}
void mark_asked(bool asked) {
  // Signals before the first ask went where they went before install(): they do not count
  // towards "the second one".
  if (asked && !g_asked) g_count = 0;
  g_asked = asked ? 1 : 0;
}
void request() {
  g_pending = 1;
}
void clear() {
  g_pending = 0;
  g_count = 0;
}

namespace {
constexpr int k_default_during[3] = {SIGTERM, SIGINT, SIGHUP};
}

DefaultActionScope::DefaultActionScope() {
  struct sigaction action {};
  action.sa_handler = SIG_DFL;
  sigemptyset(&action.sa_mask);
  for (int i = 0; i < 3; ++i) sigaction(k_default_during[i], &action, &m_old[i]);
}

DefaultActionScope::~DefaultActionScope() {
  for (int i = 0; i < 3; ++i) sigaction(k_default_during[i], &m_old[i], nullptr);
}

}  // namespace dlrun::runtime::stop_signal
