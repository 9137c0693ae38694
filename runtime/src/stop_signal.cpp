#include "stop_signal.hpp"

#include <signal.h>

#include <csignal>
#include <mutex>

namespace dlrun::runtime::stop_signal {
namespace {

volatile std::sig_atomic_t g_pending = 0;
volatile std::sig_atomic_t g_count = 0;

extern "C" void on_stop_signal(int signal) {
  g_pending = 1;
  if (signal == SIGUSR1) return;  // a stop request (a resize): never "now"
  g_count = g_count + 1;
  // A second SIGINT or SIGTERM means "now" (a second Ctrl-C): its default action, at once. It is
  // blocked while this handler runs, so it takes effect as the handler returns.
  if (g_count >= 2) {
    struct sigaction action {};
    action.sa_handler = SIG_DFL;
    sigemptyset(&action.sa_mask);
    sigaction(signal, &action, nullptr);  // async-signal-safe per POSIX, as raise()
    raise(signal);
  }
}

}  // namespace

void install() {
  static std::once_flag once;
  std::call_once(once, [] {
    struct sigaction action {};
    action.sa_handler = on_stop_signal;
    sigemptyset(&action.sa_mask);
    action.sa_flags = SA_RESTART;
    for (int signal : {SIGTERM, SIGINT, SIGUSR1}) sigaction(signal, &action, nullptr);
  });
}

bool pending() {
  return g_pending != 0;
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
