#include "goodput/divergence.hpp"

#include <cmath>
#include <stdexcept>

namespace dlrun::runtime {

DivergenceWatch::DivergenceWatch(double factor) : m_factor(factor) {
  if (!(factor > 1) || !std::isfinite(factor)) {
    throw std::invalid_argument("DivergenceWatch: factor must be finite and above 1");
  }
}

std::optional<DivergenceWatch::Alarm> DivergenceWatch::observe(double mean_loss, int64_t batch) {
  if (m_raised) return std::nullopt;
  const bool runaway = !std::isfinite(mean_loss) || (m_lowest > 0 && mean_loss > m_factor * m_lowest);
  if (runaway) {
    m_raised = true;
    return Alarm{mean_loss, m_lowest, m_lowest_batch};
  }
  if (mean_loss > 0 && (m_lowest == 0 || mean_loss < m_lowest)) {
    m_lowest = mean_loss;
    m_lowest_batch = batch;
  }
  return std::nullopt;
}

}  // namespace dlrun::runtime
