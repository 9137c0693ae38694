#pragma once
// MetricsLog: appends one JSON object per line to metrics.jsonl (docs/adaptive.md,
// "metrics.jsonl"), the channel through which the runtime tells `dlrun status` and plots how
// training goes. Each line is written with one write() on a file opened for appending, so a
// reader never sees a half line from a live writer (and a crash loses at most the line being
// written).
// Internal. Thread-safety: one writer (rank 0's training thread).

#include <filesystem>
#include <string>
#include <utility>
#include <vector>

namespace dlrun::runtime {

class MetricsLog {
 public:
  explicit MetricsLog(std::filesystem::path path);
  // {"time": <unix seconds>, key: value, …}; non-finite values become null. Never throws:
  // metrics are not worth failing training over (a write error is logged once).
  void append(const std::vector<std::pair<std::string, double>>& fields);
  const std::filesystem::path& path() const { return m_path; }

 private:
  std::filesystem::path m_path;
  bool m_warned = false;
};

// The line append() writes, without the time (pure; for tests).
std::string metrics_line(double unix_time,
                         const std::vector<std::pair<std::string, double>>& fields);

}  // namespace dlrun::runtime
