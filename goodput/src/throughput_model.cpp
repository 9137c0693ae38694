#include "goodput/throughput_model.hpp"

#include <algorithm>
#include <cmath>
#include <stdexcept>
#include <string_view>

#include "dlrun/text_fields.hpp"

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
  std::string out;  // every double in its shortest exact form: it reads back exactly
  for (const auto& [key, entry] : m_entries) {
    const auto& [nodes, replicas, micro_batch] = key;
    out += "entry " + std::to_string(nodes) + ' ' + std::to_string(replicas) + ' ' +
           std::to_string(micro_batch) + ' ' + text::number(entry.accum_time_sum) + ' ' +
           std::to_string(entry.accum_count) + ' ' + text::number(entry.optim_time_sum) + ' ' +
           std::to_string(entry.optim_count) + "\n";
  }
  return out;
}

void ThroughputProfile::deserialize(const std::string& text) {
  std::map<ProfileKey, ProfileEntry> entries;
  int line_number = 0;
  for (const std::string_view line_view : text::lines(text)) {
    ++line_number;
    const std::string line(line_view);
    const auto fields = text::fields(line_view);
    if (fields.empty()) continue;
    const std::string key(fields[0]);
    const std::string where = "throughput profile line " + std::to_string(line_number);
    if (key != "entry") throw std::invalid_argument(where + ": unknown key '" + key + "'");
    int nodes = 0, replicas = 0;
    int64_t micro_batch = 0;
    ProfileEntry entry;
    const bool parsed = fields.size() == 8 && text::parse(fields[1], nodes) &&
                        text::parse(fields[2], replicas) && text::parse(fields[3], micro_batch) &&
                        text::parse(fields[4], entry.accum_time_sum) &&
                        text::parse(fields[5], entry.accum_count) &&
                        text::parse(fields[6], entry.optim_time_sum) &&
                        text::parse(fields[7], entry.optim_count);
    if (!parsed) {
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
