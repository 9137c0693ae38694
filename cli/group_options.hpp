#pragma once
// The options every command that starts ranks shares (dlrun local, run, _slurm-run): the
// program, output and failure handling. Registered once here so that they read the same everywhere.

#include <string>

#include <CLI/CLI.hpp>

#include "commands.hpp"
#include "dlrun/launcher/plan.hpp"

namespace dlrun::cli {

struct GroupArgs {
  launcher::PlanOptions options;
  std::string ranks;
  std::string color = "auto";
  bool no_prefix = false;
  bool module = false;  // -m: the program is a Python module
  bool no_python = false;  // --no-python: a .py program runs as it is (its #! line)
};

// -m/--module, as torchrun's: PROGRAM is a Python module, run as python3 -m PROGRAM ARGS.
void add_program_options(CLI::App* app, GroupArgs& args);
void add_output_options(CLI::App* app, GroupArgs& args);
void add_failure_options(CLI::App* app, GroupArgs& args);
// The check of every option that is a duration in seconds (--grace, --watchdog, --join-timeout …):
// launcher::duration_problem, as job.toml's durations.
CLI::Validator duration_check();

// Fills args.options from what was parsed (after CLI11 is done), the command included
// (program_words(), made python3 -m … by -m).
void apply_group_options(GroupArgs& args, const CLI::App& app, const Trailing& trailing);

}  // namespace dlrun::cli
