#include "goodput/gradient_noise_scale.hpp"

#include <algorithm>
#include <cmath>
#include <numeric>
#include <stdexcept>
#include <string_view>

#include "dlrun/text_fields.hpp"

namespace dlrun::runtime {

namespace {

bool all_finite(const std::vector<double>& values) {
  return std::all_of(values.begin(), values.end(), [](double v) { return std::isfinite(v); });
}

void check_state(const NoiseScaleState& state, size_t groups) {
  if (state.sqr_biased.size() != groups || state.var_biased.size() != groups) {
    throw std::invalid_argument("gradient noise scale state has " +
                                std::to_string(state.sqr_biased.size()) + "/" +
                                std::to_string(state.var_biased.size()) +
                                " groups (sqr/var), expected " + std::to_string(groups));
  }
  if (!(state.weight >= 0 && state.weight <= 1) || state.observations < 0 ||
      !all_finite(state.sqr_biased) || !all_finite(state.var_biased)) {
    throw std::invalid_argument(
        "gradient noise scale state is corrupt: weight outside [0, 1], negative observation "
        "count or non-finite averages");
  }
}

std::vector<double> parse_values(const std::vector<std::string_view>& fields, const std::string& key) {
  std::vector<double> values;
  for (size_t i = 1; i < fields.size(); ++i) {
    double value = 0;
    if (!text::parse(fields[i], value)) {
      throw std::invalid_argument("gradient noise scale: malformed number after '" + key + "'");
    }
    values.push_back(value);
  }
  return values;
}

}  // namespace

GradientNoiseScale::GradientNoiseScale(size_t groups, double base_batch, double smoothing)
    : m_base_batch(base_batch), m_smoothing(smoothing) {
  if (groups < 1) throw std::invalid_argument("GradientNoiseScale: needs at least one group");
  if (!(base_batch > 0) || !std::isfinite(base_batch)) {
    throw std::invalid_argument("GradientNoiseScale: base_batch must be positive, got " +
                                std::to_string(base_batch));
  }
  if (!(smoothing > 0 && smoothing < 1)) {
    throw std::invalid_argument("GradientNoiseScale: smoothing must be in (0, 1), got " +
                                std::to_string(smoothing));
  }
  m_state.sqr_biased.assign(groups, 0.0);
  m_state.var_biased.assign(groups, 0.0);
}

bool GradientNoiseScale::observe(const std::vector<double>& local_sqr,
                                 const std::vector<double>& total_sqr, double local_batch,
                                 int count, double steps) {
  if (local_sqr.size() != groups() || total_sqr.size() != groups()) {
    throw std::invalid_argument("GradientNoiseScale::observe: expected " +
                                std::to_string(groups()) + " groups, got " +
                                std::to_string(local_sqr.size()) + " local and " +
                                std::to_string(total_sqr.size()) + " total norms");
  }
  if (count < 2 || !(local_batch >= 1)) {
    throw std::invalid_argument(
        "GradientNoiseScale::observe: needs count >= 2 gradients of local_batch >= 1 samples");
  }
  if (!(steps >= 1)) throw std::invalid_argument("GradientNoiseScale::observe: steps must be at least 1");
  if (!std::isfinite(local_batch) || !all_finite(local_sqr) || !all_finite(total_sqr)) {
    return false;
  }
  const double small = local_batch;
  const double big = local_batch * count;
  // The averages forget per sample, not per step, so a larger batch moves them further.
  const double theta = std::pow(m_smoothing, steps * big / m_base_batch);
  for (size_t g = 0; g < groups(); ++g) {
    const double var = (local_sqr[g] - total_sqr[g]) / (1.0 / small - 1.0 / big);
    const double sqr = total_sqr[g] - var / big;
    m_state.sqr_biased[g] = theta * m_state.sqr_biased[g] + (1 - theta) * sqr;
    m_state.var_biased[g] = theta * m_state.var_biased[g] + (1 - theta) * var;
  }
  m_state.weight = theta * m_state.weight + (1 - theta);
  ++m_state.observations;
  return true;
}

// The single-step estimates are unbiased but noisy and may be negative; the averages keep the
// sign (so the noise cancels), only the reported values are clamped.
double GradientNoiseScale::sqr(size_t group) const {
  if (!ready()) return 0;
  return std::max(m_state.sqr_biased.at(group) / m_state.weight, 0.0);
}

double GradientNoiseScale::var(size_t group) const {
  if (!ready()) return 0;
  return std::max(m_state.var_biased.at(group) / m_state.weight, 0.0);
}

double GradientNoiseScale::sqr() const {
  double sum = 0;
  for (size_t g = 0; g < groups(); ++g) sum += sqr(g);
  return sum;
}

double GradientNoiseScale::var() const {
  double sum = 0;
  for (size_t g = 0; g < groups(); ++g) sum += var(g);
  return sum;
}

double GradientNoiseScale::noise_scale() const {
  if (!ready()) return 0;
  const double s = sqr();
  const double v = var();
  if (s <= 0) return v > 0 ? k_unbounded_noise_scale : 0;
  return std::clamp(v / s, 0.0, k_unbounded_noise_scale);
}

double GradientNoiseScale::gain(double scale) const {
  if (!ready()) return 1;
  const double s = sqr();
  const double v = var();
  const double denominator = v / (m_base_batch * scale) + s;
  if (!(denominator > 0)) return 1;
  const double ratio = (v / m_base_batch + s) / denominator;
  return std::clamp(ratio, std::min(1.0, scale), std::max(1.0, scale));
}

void GradientNoiseScale::restore(const NoiseScaleState& state) {
  check_state(state, groups());
  m_state = state;
}

std::string GradientNoiseScale::serialize() const {
  // Every double in its shortest exact form (text::number): it reads back exactly.
  std::string out = "groups " + std::to_string(groups()) + "\n";
  out += "observations " + std::to_string(m_state.observations) + "\n";
  out += "weight " + text::number(m_state.weight) + "\n";
  out += "sqr_biased";
  for (double v : m_state.sqr_biased) out += ' ' + text::number(v);
  out += "\nvar_biased";
  for (double v : m_state.var_biased) out += ' ' + text::number(v);
  out += "\n";
  return out;
}

void GradientNoiseScale::deserialize(const std::string& text) {
  NoiseScaleState state;
  bool seen_weight = false, seen_observations = false;
  for (const std::string_view line_view : text::lines(text)) {
    const std::string line(line_view);
    const auto fields = text::fields(line_view);
    if (fields.empty()) continue;
    const std::string key(fields[0]);
    if (key == "groups") {
      const auto values = parse_values(fields, key);
      if (values.size() != 1 || values[0] != static_cast<double>(groups())) {
        throw std::invalid_argument("gradient noise scale: checkpoint has '" + line +
                                    "', this run has " + std::to_string(groups()) + " groups");
      }
    } else if (key == "observations" || key == "weight") {
      const auto values = parse_values(fields, key);
      if (values.size() != 1) {
        throw std::invalid_argument("gradient noise scale: '" + key + "' needs one value");
      }
      if (key == "weight") {
        state.weight = values[0];
        seen_weight = true;
      } else {
        state.observations = static_cast<int64_t>(values[0]);
        seen_observations = true;
      }
    } else if (key == "sqr_biased") {
      state.sqr_biased = parse_values(fields, key);
    } else if (key == "var_biased") {
      state.var_biased = parse_values(fields, key);
    } else {
      throw std::invalid_argument("gradient noise scale: unknown key '" + key + "'");
    }
  }
  if (!seen_weight || !seen_observations) {
    throw std::invalid_argument("gradient noise scale: 'weight' or 'observations' missing");
  }
  restore(state);
}

}  // namespace dlrun::runtime
