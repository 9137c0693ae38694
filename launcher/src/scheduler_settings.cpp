#include "dlrun/launcher/scheduler_settings.hpp"

#include <fmt/format.h>
#include <toml++/toml.h>

#include "dlrun/error.hpp"
#include "dlrun/launcher/config_file.hpp"
#include "dlrun/launcher/duration_limit.hpp"
#include "dlrun/launcher/fd_io.hpp"

namespace dlrun::launcher {
namespace {

double number(const toml::node& node, const std::string& path, const std::string& key) {
  auto value = node.value<double>();
  if (!value || !(node.is_integer() || node.is_floating_point())) config_error(path, node.source(), fmt::format("'{}' must be a number", key));
  return *value;
}

double duration(const toml::node& node, const std::string& path, const std::string& key) {
  double seconds = number(node, path, key);
  if (auto why = duration_problem(seconds)) config_error(path, node.source(), fmt::format("'{}' = {}", key, *why));
  return seconds;
}

}  // namespace

SchedulerSettings parse_scheduler_settings(std::string_view text, const std::string& path) {
  SchedulerSettings settings;
  const toml::table root = parse_config(text, path);
  const toml::table* table = config_table(root, path, "scheduler");
  if (!table) return settings;
  for (const auto& [key, value] : *table) {
    const std::string name(key.str());
    if (name == "fairness") {
      double p = number(value, path, name);
      if (!(p >= -10 && p <= 1)) config_error(path, value.source(), fmt::format("'fairness' = {}: must be from -10 to 1", p));
      settings.policy.fairness = p;
    } else if (name == "restart_seconds") {
      settings.policy.restart_seconds = duration(value, path, name);
    } else if (name == "starvation_seconds") {
      settings.policy.starvation_seconds = duration(value, path, name);
    } else if (name == "interval_seconds") {
      // One message for every value out of range, NaN included (it fails every comparison).
      const double seconds = number(value, path, name);
      if (!(seconds >= 1 && seconds <= k_max_duration_seconds)) {
        config_error(path, value.source(), fmt::format("'interval_seconds' = {}: must be a number of seconds from 1 to {}",
                                                       seconds, k_max_duration_seconds));
      }
      settings.interval_seconds = seconds;
    } else {
      config_error(path, key.source(), fmt::format("unknown key '{}' in [scheduler] (known: fairness, restart_seconds, "
                                           "starvation_seconds, interval_seconds)", name));
    }
  }
  return settings;
}

SchedulerSettings read_scheduler_settings(const std::string& home_dir) {
  const std::string path = home_dir + "/config.toml";
  auto text = read_file(path);
  return text ? parse_scheduler_settings(*text, path) : SchedulerSettings{};
}

}  // namespace dlrun::launcher
