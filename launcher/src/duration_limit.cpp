#include "dlrun/launcher/duration_limit.hpp"

#include <cmath>

#include <fmt/format.h>

namespace dlrun::launcher {

std::optional<std::string> duration_problem(double seconds, std::string_view as_written) {
  // Written so that NaN, which fails every comparison, is refused.
  if (std::isfinite(seconds) && seconds >= 0 && seconds <= k_max_duration_seconds) return std::nullopt;
  return fmt::format("{} is out of range: must be a number of seconds from 0 to {}",
                     as_written.empty() ? fmt::format("{}", seconds) : std::string(as_written), k_max_duration_seconds);
}

}  // namespace dlrun::launcher
