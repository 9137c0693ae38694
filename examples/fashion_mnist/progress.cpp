#include "progress.hpp"

#include <fmt/format.h>
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <string>

#include "dlrun/protocol.hpp"

namespace fashion_mnist {
namespace {

double now_seconds() {
  return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count();
}

}  // namespace

namespace {

// stderr is a terminal, or a pipe to dlrun that shows the bar on one.
bool terminal_shows_bar() {
  const char* tty = std::getenv(dlrun::env::k_tty);
  return ::isatty(STDERR_FILENO) == 1 || (tty != nullptr && std::string(tty) == "1");
}

}  // namespace

Progress::Progress(bool enabled) : m_enabled(enabled && terminal_shows_bar()) {}

void Progress::update(int64_t epoch, int64_t epochs, int64_t done, int64_t total, double loss) {
  if (!m_enabled) return;
  double now = now_seconds();
  if (done < total && now - m_last_draw < 0.1) return;
  m_last_draw = now;
  const int width = 30;
  int filled = total > 0 ? static_cast<int>(width * done / total) : width;
  std::string bar = std::string(filled, '#') + std::string(width - filled, ' ');
  std::fputs(fmt::format("\repoch {}/{} [{}] {:3d}% loss {:.4f}", epoch + 1, epochs, bar,
                         total > 0 ? static_cast<int>(100 * done / total) : 100, loss)
                 .c_str(),
             stderr);
  std::fflush(stderr);
}

void Progress::finish_epoch() {
  if (!m_enabled) return;
  std::fputs("\r\033[K", stderr);
  std::fflush(stderr);
}

}  // namespace fashion_mnist
