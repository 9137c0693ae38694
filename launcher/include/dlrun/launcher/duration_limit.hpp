#pragma once
// The one check of every duration a user gives in seconds (grace, watchdog, join and
// connect timeouts; on the command line and in job.toml alike): a finite number from 0 to
// one week. NaN, infinity or 1e10 seconds would overflow the timers that use them (a grace
// of NaN meant no grace at all). Pure, thread-safe.

#include <optional>
#include <string>
#include <string_view>

namespace dlrun::launcher {

inline constexpr double k_max_duration_seconds = 7 * 24 * 3600;  // 604800

// nullopt when `seconds` is a usable duration; else why not, to follow the setting's name in
// a message: "nan is out of range: must be a number of seconds from 0 to 604800". The value
// is shown `as_written` by the user where given (the command line's "1e10").
std::optional<std::string> duration_problem(double seconds, std::string_view as_written = {});

}  // namespace dlrun::launcher
