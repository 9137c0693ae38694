#pragma once
// The one logger of dlrun's libraries: they never print, they call DLRUN_LOG. Messages
// go to stderr as `dlrun: <message>` (`dlrun: warning: …` and so on). The level is checked
// before the message is formatted, so a disabled debug line costs one comparison.
// Level comes from DLRUN_LOG_LEVEL (debug, info, warn, error, off) or set_level().
// Thread-safe: each message is written with a single write(2).

#include <functional>
#include <string>
#include <string_view>

#include <fmt/format.h>

namespace dlrun::log {

enum class Level { debug = 0, info = 1, warn = 2, error = 3, off = 4 };

Level level();
void set_level(Level level);
// Reads DLRUN_LOG_LEVEL; an unknown value leaves the level unchanged, with a warning.
void init_from_env();
// What starts each line, "dlrun" by default; agents use "dlrun[host]".
void set_prefix(const std::string& prefix);
// What starts each line now, with its ": " ("dlrun: ", "dlrun[node2]: ").
std::string prefix();
bool enabled(Level level);
void write(Level level, std::string_view message);
// Where whole lines go instead of straight to stderr (e.g. behind the ranks' output that a
// supervisor has queued for stderr, so that the order holds); an empty function: stderr again.
// The sink is called under a lock: it must not log.
void set_sink(std::function<void(std::string_view line)> sink);
// Every line written (at its level or above) while no sink is set is also appended to `fd`
// (a sink copies what it takes itself); -1: no copy. The fd stays the caller's.
void set_copy(int fd);
// Off: lines written while no sink is set go to the copy only (stderr is a reader that does
// not read, and the process must not wait on it). On by default.
void set_stderr(bool on);

template <typename... Args>
void debug(fmt::format_string<Args...> format, Args&&... args) {
  if (enabled(Level::debug)) write(Level::debug, fmt::format(format, std::forward<Args>(args)...));
}
template <typename... Args>
void info(fmt::format_string<Args...> format, Args&&... args) {
  if (enabled(Level::info)) write(Level::info, fmt::format(format, std::forward<Args>(args)...));
}
template <typename... Args>
void warn(fmt::format_string<Args...> format, Args&&... args) {
  if (enabled(Level::warn)) write(Level::warn, fmt::format(format, std::forward<Args>(args)...));
}
template <typename... Args>
void error(fmt::format_string<Args...> format, Args&&... args) {
  if (enabled(Level::error)) write(Level::error, fmt::format(format, std::forward<Args>(args)...));
}

}  // namespace dlrun::log
