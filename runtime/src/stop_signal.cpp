#include "stop_signal.hpp"

#include <signal.h>

#include <csignal>
#include <mutex>

namespace dlrun::runtime::stop_signal {
namespace {

volatile std::sig_atomic_t g_pending = 0;
volatile std::sig_atomic_t g_count = 0;
volatile std::sig_atomic_t g_asked = 0;
// The handlers of SIGTERM and SIGINT before install() (Python's KeyboardInterrupt, a user's own).
struct sigaction g_previous[2];

// The handler install() found for `signal` when it is a function of the program's (not the
// default action, not ignored), or nullptr.
void (*previous_handler(int signal))(int) {
  const struct sigaction& previous = g_previous[signal == SIGINT ? 1 : 0];
  if ((previous.sa_flags & SA_SIGINFO) || previous.sa_handler == SIG_DFL || previous.sa_handler == SIG_IGN)
    return nullptr;
  return previous.sa_handler;
}

extern "C" void on_stop_signal(int signal) {
  g_pending = 1;
  if (signal == SIGUSR1) return;  // a stop request (a resize): never "now"
  g_count = g_count + 1;
  // A program that has never asked for a stop request would not stop before the launcher's
  // SIGKILL: the first SIGINT or SIGTERM does what it did before install() (Python raises
  // KeyboardInterrupt), or takes its default action.
  if (g_count == 1 && !g_asked) {
    if (auto handler = previous_handler(signal)) return handler(signal);
  }
  // A second one means "now" (a second Ctrl-C), as does a first one as above: its default
  // action, at once. It is blocked while this handler runs, so it takes effect as the handler
  // returns.
  if (g_count >= 2 || !g_asked) {
    struct sigaction action {};
    action.sa_handler = SIG_DFL;
    sigemptyset(&action.sa_mask);
    sigaction(signal, &action, nullptr);  // async-signal-safe per POSIX, as raise()
    raise(signal);
  }
}

}  // namespace

void install() {
  static std::mutex mutex;
  std::lock_guard lock(mutex);
  struct sigaction current {};
  sigaction(SIGTERM, nullptr, &current);
  if (current.sa_handler == on_stop_signal) return;  // installed already: keep what it found
  {
    struct sigaction action {};
    action.sa_handler = on_stop_signal;
    sigemptyset(&action.sa_mask);
    action.sa_flags = SA_RESTART;
    sigaction(SIGTERM, &action, &g_previous[0]);
    sigaction(SIGINT, &action, &g_previous[1]);
    sigaction(SIGUSR1, &action, nullptr);
  }
}

bool pending() {
  return g_pending != 0;
}
void mark_asked(bool asked) {
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
constexpr int k_default_during[2] = {SIGTERM, SIGINT};
}

DefaultActionScope::DefaultActionScope() {
  struct sigaction action {};
  action.sa_handler = SIG_DFL;
  sigemptyset(&action.sa_mask);
  for (int i = 0; i < 2; ++i) sigaction(k_default_during[i], &action, &m_old[i]);
}

DefaultActionScope::~DefaultActionScope() {
  for (int i = 0; i < 2; ++i) sigaction(k_default_during[i], &m_old[i], nullptr);
}

}  // namespace dlrun::runtime::stop_signal
