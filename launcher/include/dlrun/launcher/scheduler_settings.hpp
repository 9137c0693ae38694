#pragma once
// The goodput scheduler's settings, in one documented place: the [scheduler] table of
// $DLRUN_HOME/config.toml (docs/scheduling.md, "Settings"). A missing file or table gives the
// defaults; a bad value is a ConfigError naming the file, the line and the setting.

#include <string>
#include <string_view>

#include "dlrun/launcher/goodput_policy.hpp"

namespace dlrun::launcher {

struct SchedulerSettings {
  PolicySettings policy;        // capacity is the machine's, filled in by the caller
  double interval_seconds = 60; // how often the policy runs (also on arrivals and completions)
};

// `text` is the file's contents, `path` names it in messages.
SchedulerSettings parse_scheduler_settings(std::string_view text, const std::string& path);
// $HOME_DIR/config.toml, or the defaults when there is none.
SchedulerSettings read_scheduler_settings(const std::string& home_dir);

}  // namespace dlrun::launcher
