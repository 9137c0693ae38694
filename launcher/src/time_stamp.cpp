#include "dlrun/launcher/time_stamp.hpp"

#include <fmt/chrono.h>
#include <fmt/compile.h>

namespace dlrun::launcher {

std::string utc_iso8601(std::time_t time) {
  // Fields through a compiled format, not a chrono format string parsed at each call:
  // `dlrun status --all --json` writes 30,000 of these.
  const std::tm t = fmt::gmtime(time);
  char text[64];
  char* end = fmt::format_to(text, FMT_COMPILE("{:04}-{:02}-{:02}T{:02}:{:02}:{:02}Z"), t.tm_year + 1900, t.tm_mon + 1,
                             t.tm_mday, t.tm_hour, t.tm_min, t.tm_sec);
  return std::string(text, end);
}

std::string local_iso8601(std::time_t time) {
  const std::tm t = fmt::localtime(time);
  char text[64];
  char* end = fmt::format_to(text, FMT_COMPILE("{:04}-{:02}-{:02}T{:02}:{:02}:{:02}"), t.tm_year + 1900, t.tm_mon + 1,
                             t.tm_mday, t.tm_hour, t.tm_min, t.tm_sec);
  return std::string(text, end);
}

std::string local_compact_stamp(std::time_t time) {
  return fmt::format("{:%Y%m%d-%H%M%S}", fmt::localtime(time));
}

}  // namespace dlrun::launcher
