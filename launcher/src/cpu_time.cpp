#include "dlrun/launcher/cpu_time.hpp"

#include <unistd.h>

#include <fstream>
#include <iterator>
#include <sstream>
#include <string>

namespace dlrun::launcher {

std::optional<double> cpu_seconds(pid_t pid) {
  if (pid <= 0) return std::nullopt;
  std::ifstream file("/proc/" + std::to_string(pid) + "/stat");
  const std::string text((std::istreambuf_iterator<char>(file)), std::istreambuf_iterator<char>());
  // Fields after the command name, which may hold spaces and parentheses: 3 (state) onwards.
  const auto close = text.rfind(')');
  if (close == std::string::npos || close + 2 > text.size()) return std::nullopt;
  std::istringstream rest(text.substr(close + 2));
  std::string skip;
  for (int field = 3; field < 14; ++field) rest >> skip;
  unsigned long long ticks[4] = {};  // utime, stime, cutime, cstime: fields 14 to 17
  for (auto& value : ticks) rest >> value;
  if (!rest) return std::nullopt;
  const long per_second = ::sysconf(_SC_CLK_TCK);
  if (per_second <= 0) return std::nullopt;
  return static_cast<double>(ticks[0] + ticks[1] + ticks[2] + ticks[3]) / static_cast<double>(per_second);
}

}  // namespace dlrun::launcher
