#include "dlrun/launcher/duration_limit.hpp"

#include <cmath>

#include <fmt/format.h>

namespace dlrun::launcher {

std::optional<std::string> duration_problem(double seconds) {
  // Written so that NaN, which fails every comparison, is refused.
  if (std::isfinite(seconds) && seconds >= 0 && seconds <= k_max_duration_seconds) return std::nullopt;
  return fmt::format("{} is out of range: must be a number of seconds from 0 to {}", seconds, k_max_duration_seconds);
}

}  // namespace dlrun::launcher
