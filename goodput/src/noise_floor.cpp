#include "goodput/noise_floor.hpp"

#include <algorithm>
#include <cmath>
#include <stdexcept>

namespace dlrun::runtime {
namespace {

constexpr size_t k_kept_intervals = 4;

bool positive(double x) {
  return std::isfinite(x) && x > 0;
}

}  // namespace

double noise_floor(double lr, double variance, double batch) {
  if (!positive(lr) || !positive(variance) || !positive(batch)) return 0;
  return lr * variance / (4 * batch);
}

void LossTrend::add(double start, double end, double mean_loss, int64_t batch) {
  if (!std::isfinite(start) || !std::isfinite(end) || !std::isfinite(mean_loss) || end <= start) {
    return;
  }
  m_intervals.push_back({(start + end) / 2, mean_loss, batch});
  if (m_intervals.size() > k_kept_intervals) m_intervals.erase(m_intervals.begin());
}

std::optional<double> LossTrend::fall_rate(int64_t batch) const {
  const size_t n = m_intervals.size();
  if (n < 2) return std::nullopt;
  const Interval& before = m_intervals[n - 2];
  const Interval& last = m_intervals[n - 1];
  if (before.batch != batch || last.batch != batch || last.middle <= before.middle) {
    return std::nullopt;
  }
  return std::max(0.0, (before.loss - last.loss) / (last.middle - before.middle));
}

double floor_value(const FloorInputs& in, const GoodputPoint& point) {
  const double batch = static_cast<double>(point.shape.global_batch());
  const double progress = in.fall_rate * point.goodput / in.current_goodput;
  if (!(point.throughput > 0) || !(batch > 0)) return progress;
  // The seconds until the next decision at this shape.
  const double horizon = in.horizon_steps * batch / point.throughput;
  const double gained = in.floor_at(static_cast<double>(in.current_batch)) - in.floor_at(batch);
  return progress + gained / horizon;
}

bool should_switch_with_floor(const FloorInputs& in, const GoodputPoint& current, double value,
                              double min_improvement) {
  const double batch = static_cast<double>(current.shape.global_batch());
  double scale = in.fall_rate;
  if (current.throughput > 0 && batch > 0) {
    scale += in.floor_at(batch) * current.throughput / (in.horizon_steps * batch);
  }
  return value > 0 && value - in.fall_rate >= min_improvement * scale && scale > 0;
}

std::pair<GoodputPoint, double> choose_batch_with_floor(const ThroughputParams& params,
                                                        double noise_scale, int nodes, int replicas,
                                                        const BatchLimits& limits,
                                                        EfficiencyModel model,
                                                        const FloorInputs& in) {
  if (!(in.current_goodput > 0) || !(in.horizon_steps > 0) || !in.floor_at) {
    throw std::invalid_argument(
        "choose_batch_with_floor: needs a positive current goodput and horizon, and floor_at");
  }
  return choose_batch_by(params, noise_scale, nodes, replicas, limits, model,
                         [&in](const GoodputPoint& point) { return floor_value(in, point); });
}

}  // namespace dlrun::runtime
