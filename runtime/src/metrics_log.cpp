#include "metrics_log.hpp"

#include <fcntl.h>
#include <fmt/format.h>
#include <nlohmann/json.hpp>
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <cmath>
#include <cstring>

#include "dlrun/log.hpp"

namespace dlrun::runtime {

std::string metrics_line(double unix_time,
                         const std::vector<std::pair<std::string, double>>& fields) {
  // In the order given, whole numbers as integers, what is not finite as null.
  nlohmann::ordered_json line;
  line["time"] = std::round(unix_time * 1000) / 1000;
  for (const auto& [key, value] : fields) {
    if (!std::isfinite(value)) {
      line[key] = nullptr;
    } else if (value == std::trunc(value) && std::fabs(value) < 9e15) {
      line[key] = static_cast<int64_t>(value);
    } else {
      line[key] = value;
    }
  }
  return line.dump() + "\n";
}

MetricsLog::MetricsLog(std::filesystem::path path) : m_path(std::move(path)) {}

void MetricsLog::append(const std::vector<std::pair<std::string, double>>& fields) {
  const double now =
      std::chrono::duration<double>(std::chrono::system_clock::now().time_since_epoch()).count();
  const std::string line = metrics_line(now, fields);
  const int fd = ::open(m_path.c_str(), O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC, 0644);
  const bool ok =
      fd >= 0 && ::write(fd, line.data(), line.size()) == static_cast<ssize_t>(line.size());
  const int error = errno;
  if (fd >= 0) ::close(fd);
  if (!ok && !m_warned) {
    m_warned = true;
    log::warn("cannot append to {}: {} (metrics are not written)", m_path.string(),
              std::strerror(error));
  }
}

}  // namespace dlrun::runtime
