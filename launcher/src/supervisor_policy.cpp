#include "dlrun/launcher/supervisor_policy.hpp"

#include "dlrun/protocol.hpp"

#include <algorithm>

namespace dlrun::launcher {

Decision decide_after_attempt(const AttemptEnd& end) {
  if (end.stop_signal) return {NextStep::finish, exit_code::k_signal_base + end.stop_signal, false, true};
  if (end.resize_pending && !end.restart_requested && !end.failure_code && end.all_succeeded) {
    return {NextStep::finished_before_resize, exit_code::k_success};
  }
  if (end.late_signal) {
    if (end.failure_code) return {NextStep::finish, *end.failure_code};
    if (end.all_succeeded) return {NextStep::finish, exit_code::k_success};
    return {NextStep::finish, exit_code::k_signal_base + end.late_signal, false, true};
  }
  if (end.resize_pending) return {NextStep::resize};
  if (end.failure_code) {
    if (end.failures_restarted < end.max_restarts) return {NextStep::restart_after_failure};
    return {NextStep::finish, *end.failure_code, end.max_restarts > 0};
  }
  if (end.restart_requested) return {NextStep::restart_on_request};
  return {NextStep::finish, exit_code::k_success};
}

std::chrono::milliseconds restart_request_delay(int quick_in_a_row) {
  constexpr int k_free = 3;
  constexpr std::chrono::milliseconds k_most{30000};
  if (quick_in_a_row <= k_free) return std::chrono::milliseconds(0);
  const int doublings = std::min(quick_in_a_row - k_free - 1, 5);  // 2^5 s > 30 s
  return std::min(k_most, std::chrono::milliseconds(1000 << doublings));
}

bool waits_idle(double cpu_seconds_used, double over_seconds) {
  return over_seconds > 0 && cpu_seconds_used <= 0.02 * over_seconds;
}

bool restart_requests_loop(int quick_in_a_row) {
  constexpr int k_most = 10;
  return quick_in_a_row >= k_most;
}

bool GpuFailures::count(const std::string& gpu, int world_size, int min_world_size) {
  in_a_row = gpu == last_gpu ? in_a_row + 1 : 1;
  last_gpu = gpu;
  if (in_a_row < k_failures_to_leave_out || world_size - 1 < min_world_size) return false;
  in_a_row = 0;
  last_gpu.clear();
  return true;
}

}  // namespace dlrun::launcher
