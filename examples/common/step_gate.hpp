#pragma once
// --step-gate FILE: a test paces training by the steps it allows, not by guessing how long a
// run lasts. Before step S every rank waits until FILE holds a number >= S (a missing or
// unreadable file allows nothing). A stop request ends the wait early, so that the step
// carrying it is taken and the ranks can agree to stop (Context::stop_pending()).
// Not thread-safe; one per rank.

#include <cstdint>
#include <functional>
#include <string>

namespace examples {

class StepGate {
 public:
  explicit StepGate(std::string path);  // path empty: every step is allowed at once
  // Blocks until `step` is allowed or stop_pending() turns true.
  void wait_for(int64_t step, const std::function<bool()>& stop_pending);

 private:
  int64_t read_limit() const;

  std::string m_path;
  int64_t m_limit = 0;  // the highest step the file allowed when last read
};

}  // namespace examples
