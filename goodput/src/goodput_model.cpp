#include "goodput/goodput_model.hpp"

#include <algorithm>
#include <cmath>
#include <stdexcept>

#include <nlohmann/json.hpp>

namespace dlrun::runtime {
namespace {

constexpr int k_version = 1;

}  // namespace

std::string to_json(const GoodputModel& m) {
  nlohmann::ordered_json j;
  j["version"] = k_version;
  j["params"] = {{"alpha_c", m.params.alpha_c}, {"beta_c", m.params.beta_c}, {"alpha_n", m.params.alpha_n},
                 {"beta_n", m.params.beta_n},   {"alpha_r", m.params.alpha_r}, {"beta_r", m.params.beta_r},
                 {"gamma", m.params.gamma}};
  j["noise_scale"] = std::isfinite(m.noise_scale) ? m.noise_scale : 0.0;
  j["efficiency"] = to_string(m.efficiency);
  j["initial_batch"] = m.limits.initial_batch;
  j["max_batch"] = m.limits.max_batch;
  j["min_micro_batch"] = m.limits.min_micro_batch;
  j["max_micro_batch"] = m.limits.max_micro_batch;
  j["allow_accumulation"] = m.limits.allow_accumulation;
  j["measured_replicas"] = m.measured_replicas;
  j["compute_timed"] = m.compute_timed;
  j["replicas"] = m.replicas;
  j["global_batch"] = m.global_batch;
  return j.dump() + "\n";
}

std::optional<GoodputModel> parse_goodput_model(std::string_view text) {
  auto j = nlohmann::json::parse(text, nullptr, /*allow_exceptions=*/false);
  if (!j.is_object() || j.value("version", 0) != k_version) return std::nullopt;
  try {
    GoodputModel m;
    const auto& p = j.at("params");
    m.params = {p.at("alpha_c").get<double>(), p.at("beta_c").get<double>(), p.at("alpha_n").get<double>(),
                p.at("beta_n").get<double>(),  p.at("alpha_r").get<double>(), p.at("beta_r").get<double>(),
                p.at("gamma").get<double>()};
    m.noise_scale = j.at("noise_scale").get<double>();
    // Written since the adam efficiency; a file without it is from a job that used sgd's.
    const auto efficiency = parse_efficiency_model(j.value("efficiency", std::string("sgd")));
    if (!efficiency) return std::nullopt;
    m.efficiency = *efficiency;
    m.limits.initial_batch = j.at("initial_batch").get<int64_t>();
    m.limits.max_batch = j.at("max_batch").get<int64_t>();
    m.limits.min_micro_batch = j.at("min_micro_batch").get<int64_t>();
    m.limits.max_micro_batch = j.at("max_micro_batch").get<int64_t>();
    m.limits.allow_accumulation = j.at("allow_accumulation").get<bool>();
    m.measured_replicas = j.at("measured_replicas").get<std::vector<int>>();
    m.compute_timed = j.value("compute_timed", true);  // written since 2026-11-29
    m.replicas = j.at("replicas").get<int>();
    m.global_batch = j.at("global_batch").get<int64_t>();
    for (double v : {m.params.alpha_c, m.params.beta_c, m.params.alpha_n, m.params.beta_n, m.params.alpha_r,
                     m.params.beta_r, m.noise_scale}) {
      if (!std::isfinite(v) || v < 0) return std::nullopt;
    }
    if (!(m.params.gamma >= 1 && m.params.gamma <= 10) || m.limits.initial_batch < 1 ||
        m.limits.max_batch < m.limits.initial_batch || m.limits.min_micro_batch < 1 || m.replicas < 1) {
      return std::nullopt;
    }
    return m;
  } catch (const nlohmann::json::exception&) {
    return std::nullopt;
  }
}

double predict_goodput(const GoodputModel& model, int replicas) {
  if (replicas < 1) return 0;
  auto at = [&model](int count) {
    return choose_batch(model.params, model.noise_scale, 1, count, model.limits, model.efficiency).goodput;
  };
  try {
    if (!model.compute_timed && !model.measured_replicas.empty()) {
      const int fewest = *std::min_element(model.measured_replicas.begin(), model.measured_replicas.end());
      if (replicas < fewest) return at(fewest) * replicas / fewest;
    }
    return at(replicas);
  } catch (const std::invalid_argument&) {
    return 0;
  }
}

}  // namespace dlrun::runtime
