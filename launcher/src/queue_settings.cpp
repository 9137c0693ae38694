#include "dlrun/launcher/queue_settings.hpp"

#include <fmt/format.h>
#include <toml++/toml.h>

#include "dlrun/launcher/config_file.hpp"
#include "dlrun/launcher/fd_io.hpp"

namespace dlrun::launcher {

QueueSettings parse_queue_settings(std::string_view text, const std::string& path) {
  QueueSettings settings;
  const toml::table root = parse_config(text, path);
  const toml::table* table = config_table(root, path, "queue");
  if (!table) return settings;
  for (const auto& [key, value] : *table) {
    const std::string name(key.str());
    if (name == "cpu_slots") {
      const auto n = value.value<int64_t>();
      if (!value.is_integer() || !n || *n < 1 || *n > k_max_cpu_slots) {
        config_error(path, value.source(),
                     fmt::format("'cpu_slots' must be a whole number of CPU ranks from 1 to {}", k_max_cpu_slots));
      }
      settings.cpu_slots = static_cast<int>(*n);
    } else {
      config_error(path, key.source(), fmt::format("unknown key '{}' in [queue] (known: cpu_slots)", name));
    }
  }
  return settings;
}

QueueSettings read_queue_settings(const std::string& home_dir) {
  const std::string path = home_dir + "/config.toml";
  auto text = read_file(path);
  return text ? parse_queue_settings(*text, path) : QueueSettings{};
}

}  // namespace dlrun::launcher
