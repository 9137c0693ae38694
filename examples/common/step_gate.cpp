#include "step_gate.hpp"

#include <chrono>
#include <fstream>
#include <thread>
#include <utility>

namespace examples {

StepGate::StepGate(std::string path) : m_path(std::move(path)) {}

void StepGate::wait_for(int64_t step, const std::function<bool()>& stop_pending) {
  if (m_path.empty()) return;
  while (step > m_limit) {
    m_limit = read_limit();
    if (step <= m_limit || stop_pending()) return;
    std::this_thread::sleep_for(std::chrono::milliseconds(2));
  }
}

int64_t StepGate::read_limit() const {
  std::ifstream in(m_path);
  int64_t limit = 0;
  if (!(in >> limit)) return 0;  // not written yet, or half written: allow nothing
  return limit;
}

}  // namespace examples
