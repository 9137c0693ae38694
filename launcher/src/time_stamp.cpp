#include "dlrun/launcher/time_stamp.hpp"

#include <fmt/chrono.h>

namespace dlrun::launcher {

std::string utc_iso8601(std::time_t time) {
  return fmt::format("{:%Y-%m-%dT%H:%M:%SZ}", fmt::gmtime(time));
}

std::string local_compact_stamp(std::time_t time) {
  return fmt::format("{:%Y%m%d-%H%M%S}", fmt::localtime(time));
}

}  // namespace dlrun::launcher
