#pragma once
// [queue] in $DLRUN_HOME/config.toml: what the job queue counts as this machine's room for CPU
// jobs. One value for every job of the store: DLRUN_CPU_SLOTS in the environment is read by
// each job's supervisor from the shell that submitted it, so two shells could each fill the
// machine by their own count. A bad value is a ConfigError naming the file, line and key.

#include <optional>
#include <string>
#include <string_view>

namespace dlrun::launcher {

inline constexpr int k_max_cpu_slots = 65536;

struct QueueSettings {
  std::optional<int> cpu_slots;  // CPU ranks at once; none: DLRUN_CPU_SLOTS, else the usable cores
};

QueueSettings parse_queue_settings(std::string_view text, const std::string& path);
// $HOME_DIR/config.toml's [queue], or the defaults.
QueueSettings read_queue_settings(const std::string& home_dir);

}  // namespace dlrun::launcher
