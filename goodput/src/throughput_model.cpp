#include "goodput/throughput_model.hpp"

#include <algorithm>
#include <cmath>
#include <iomanip>
#include <locale>
#include <sstream>
#include <stdexcept>

namespace dlrun::runtime {

double predict_grad_time(const ThroughputParams& p, int64_t micro_batch) {
  return p.alpha_c + p.beta_c * static_cast<double>(micro_batch);
}

double predict_sync_time(const ThroughputParams& p, int nodes, int replicas) {
  if (replicas <= 1) return 0;
  const double extra = std::max(replicas - 2, 0);
  return nodes <= 1 ? p.alpha_n + p.beta_n * extra : p.alpha_r + p.beta_r * extra;
}

double predict_optim_time(const ThroughputParams& p, const StepShape& shape) {
  const double grad = predict_grad_time(p, shape.micro_batch);
  const double sync = predict_sync_time(p, shape.nodes, shape.replicas);
  if (sync <= 0) return grad;  // also avoids pow(0, 1/gamma) when both are 0
  // Scale by the larger term so pow() cannot overflow for gamma up to 10.
  const double top = std::max(grad, sync);
  if (top <= 0) return 0;
  const double g = std::max(grad, 0.0) / top, s = sync / top;
  return top * std::pow(std::pow(g, p.gamma) + std::pow(s, p.gamma), 1.0 / p.gamma);
}

double predict_step_time(const ThroughputParams& p, const StepShape& shape) {
  const int extra_steps = std::max(shape.accum_steps - 1, 0);
  return extra_steps * predict_grad_time(p, shape.micro_batch) + predict_optim_time(p, shape);
}

double predict_throughput(const ThroughputParams& p, const StepShape& shape) {
  const double seconds = predict_step_time(p, shape);
  // Unfitted (all-zero) parameters predict no time: report no throughput rather than infinity.
  if (!(seconds > 0)) return 0;
  return static_cast<double>(shape.global_batch()) / seconds;
}

namespace {

// A time that cannot be a measurement (a broken clock, an overflow) must not reach the fit.
bool usable(double seconds) {
  return std::isfinite(seconds) && seconds > 0;
}

}  // namespace

void ThroughputProfile::add_accum(int nodes, int replicas, int64_t micro_batch, double seconds) {
  if (!usable(seconds)) return;
  auto& entry = m_entries[ProfileKey{nodes, replicas, micro_batch}];
  entry.accum_time_sum += seconds;
  ++entry.accum_count;
}

void ThroughputProfile::add_optim(int nodes, int replicas, int64_t micro_batch, double seconds) {
  if (!usable(seconds)) return;
  auto& entry = m_entries[ProfileKey{nodes, replicas, micro_batch}];
  entry.optim_time_sum += seconds;
  ++entry.optim_count;
}

std::string ThroughputProfile::serialize() const {
  std::ostringstream out;
  out.imbue(std::locale::classic());
  out << std::setprecision(17);  // every double reads back exactly
  for (const auto& [key, entry] : m_entries) {
    const auto& [nodes, replicas, micro_batch] = key;
    out << "entry " << nodes << ' ' << replicas << ' ' << micro_batch << ' ' << entry.accum_time_sum
        << ' ' << entry.accum_count << ' ' << entry.optim_time_sum << ' ' << entry.optim_count
        << "\n";
  }
  return out.str();
}

void ThroughputProfile::deserialize(const std::string& text) {
  std::map<ProfileKey, ProfileEntry> entries;
  std::istringstream in(text);
  std::string line;
  int line_number = 0;
  while (std::getline(in, line)) {
    ++line_number;
    std::istringstream fields(line);
    fields.imbue(std::locale::classic());
    std::string key;
    if (!(fields >> key)) continue;
    const std::string where = "throughput profile line " + std::to_string(line_number);
    if (key != "entry") throw std::invalid_argument(where + ": unknown key '" + key + "'");
    int nodes = 0, replicas = 0;
    int64_t micro_batch = 0;
    ProfileEntry entry;
    fields >> nodes >> replicas >> micro_batch >> entry.accum_time_sum >> entry.accum_count >>
        entry.optim_time_sum >> entry.optim_count;
    std::string rest;
    if (fields.fail() || (fields >> rest)) {
      throw std::invalid_argument(where +
                                  ": expected 'entry nodes replicas micro_batch "
                                  "accum_sum accum_count optim_sum optim_count', got '" +
                                  line + "'");
    }
    if (nodes < 1 || replicas < 1 || micro_batch < 1 || entry.accum_count < 0 ||
        entry.optim_count < 0 || !(entry.accum_time_sum >= 0) || !(entry.optim_time_sum >= 0) ||
        !std::isfinite(entry.accum_time_sum) || !std::isfinite(entry.optim_time_sum)) {
      throw std::invalid_argument(where + ": value out of range in '" + line + "'");
    }
    entries[ProfileKey{nodes, replicas, micro_batch}] = entry;
  }
  m_entries = std::move(entries);
}

}  // namespace dlrun::runtime
