#include "dlrun/log.hpp"

#include <unistd.h>

#include <atomic>
#include <functional>
#include <mutex>
#include <cstdlib>
#include <string>

#include "dlrun/protocol.hpp"

namespace dlrun::log {
namespace {

std::atomic<int> g_level{static_cast<int>(Level::info)};
std::mutex g_sink_mutex;
std::function<void(std::string_view)> g_sink;
std::atomic<int> g_copy_fd{-1};
std::atomic<bool> g_stderr{true};

// One write per line keeps concurrent lines whole; a short write to a closed or full file is
// not worth failing the launcher for.
void write_line(int fd, std::string_view line) {
  const char* data = line.data();
  size_t left = line.size();
  while (left > 0) {
    ssize_t n = ::write(fd, data, left);
    if (n <= 0) break;
    data += n;
    left -= static_cast<size_t>(n);
  }
}
std::string& line_prefix() {
  static std::string prefix = "dlrun: ";
  return prefix;
}

const char* label(Level level) {
  switch (level) {
    case Level::debug: return "debug: ";
    case Level::warn: return "warning: ";
    case Level::error: return "error: ";
    default: return "";
  }
}

}  // namespace

Level level() { return static_cast<Level>(g_level.load(std::memory_order_relaxed)); }

void set_level(Level level) { g_level.store(static_cast<int>(level), std::memory_order_relaxed); }

bool enabled(Level level) {
  return static_cast<int>(level) >= g_level.load(std::memory_order_relaxed);
}

void init_from_env() {
  const char* value = std::getenv(env::k_log_level);
  if (value == nullptr) return;
  std::string_view v(value);
  if (v == "debug") set_level(Level::debug);
  else if (v == "info") set_level(Level::info);
  else if (v == "warn" || v == "warning") set_level(Level::warn);
  else if (v == "error") set_level(Level::error);
  else if (v == "off" || v == "quiet") set_level(Level::off);
  else if (!v.empty()) write(Level::warn, fmt::format("{}={}: not a level (debug, info, warn, error or off); the "
                                                      "level stays as it was", env::k_log_level, v));
}

void set_sink(std::function<void(std::string_view line)> sink) {
  std::lock_guard lock(g_sink_mutex);
  g_sink = std::move(sink);
}

void set_prefix(const std::string& prefix) { line_prefix() = prefix + ": "; }

std::string prefix() { return line_prefix(); }

void write(Level level, std::string_view message) {
  std::string line = line_prefix();
  line += label(level);
  line.append(message.data(), message.size());
  line += '\n';
  {
    std::lock_guard lock(g_sink_mutex);
    if (g_sink) {
      g_sink(line);
      return;
    }
  }
  if (const int copy = g_copy_fd.load(std::memory_order_relaxed); copy >= 0) write_line(copy, line);
  if (g_stderr.load(std::memory_order_relaxed)) write_line(STDERR_FILENO, line);
}

void set_copy(int fd) { g_copy_fd.store(fd, std::memory_order_relaxed); }

void set_stderr(bool on) { g_stderr.store(on, std::memory_order_relaxed); }

}  // namespace dlrun::log
