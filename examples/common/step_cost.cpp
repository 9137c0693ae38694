#include "step_cost.hpp"

#include <chrono>
#include <thread>

namespace examples {

double StepCost::micro_batch_ms(int64_t samples, bool last, int world_size) const {
  double ms = sample_ms * static_cast<double>(samples);
  if (last) ms += step_ms + sync_ms_per_rank * static_cast<double>(world_size - 1);
  return ms;
}

void sleep_ms(double milliseconds) {
  if (milliseconds <= 0) return;
  std::this_thread::sleep_for(std::chrono::duration<double, std::milli>(milliseconds));
}

}  // namespace examples
