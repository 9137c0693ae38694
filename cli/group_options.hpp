#pragma once
// The options every command that starts ranks shares (dlrun local, run, _slurm-run): output
// and failure handling. Registered once here so that they read the same everywhere.

#include <string>

#include <CLI/CLI.hpp>

#include "dlrun/launcher/plan.hpp"

namespace dlrun::cli {

struct GroupArgs {
  launcher::PlanOptions options;
  std::string ranks;
  std::string color = "auto";
  bool no_prefix = false;
};

void add_output_options(CLI::App* app, GroupArgs& args);
void add_failure_options(CLI::App* app, GroupArgs& args);
// The check of every option that is a duration in seconds (--grace, --watchdog, --join-timeout …):
// launcher::duration_problem, as job.toml's durations.
CLI::Validator duration_check();

// Fills args.options from what was parsed (after CLI11 is done).
void apply_group_options(GroupArgs& args, const CLI::App& app);

}  // namespace dlrun::cli
