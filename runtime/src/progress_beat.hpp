#pragma once
// While a ProgressBeat lives, the launcher's watchdog hears from this rank every second
// (progress_file touched from a thread of its own, as a step touches it): writing or reading a
// checkpoint is work, not a hang. A save slower than --watchdog was taken for a hung rank, and
// a healthy job restarted (or failed, without restarts left). Internal; no LibTorch.

#include <condition_variable>
#include <mutex>
#include <string>
#include <thread>

namespace dlrun::runtime {

class ProgressBeat {
 public:
  explicit ProgressBeat(std::string progress_file);  // empty: does nothing
  ~ProgressBeat();
  ProgressBeat(const ProgressBeat&) = delete;
  ProgressBeat& operator=(const ProgressBeat&) = delete;

 private:
  std::string m_file;
  std::mutex m_mutex;
  std::condition_variable m_wake;
  bool m_stop = false;
  std::thread m_thread;
};

// Touches `file` (creates it the first time): what a step does for the watchdog.
void touch_progress_file(const std::string& file);

}  // namespace dlrun::runtime
