#pragma once
// The subcommands of the dlrun executable. Each cmd_<verb>.cpp registers its options on
// the CLI11 app and returns the function that runs it once parsing succeeded; the work
// itself is in the launcher library. main.cpp is the one place that catches and prints.

#include <functional>
#include <string>
#include <vector>

#include <CLI/CLI.hpp>

namespace dlrun::cli {

// What followed the first "--" on the command line. CLI11 stops at the first word it
// does not know (prefix_command) but rejects a bare "--"; main.cpp cuts it off first.
struct Trailing {
  bool present = false;
  std::vector<std::string> words;
};

struct Command {
  CLI::App* app = nullptr;
  std::function<int(const Trailing&)> run;
};

// The program and its arguments: the words CLI11 left over, then the trailing ones. A
// leftover word that looks like an option is a typo of ours, reported with a suggestion.
std::vector<std::string> program_words(const CLI::App& app, const Trailing& trailing);

Command add_local_command(CLI::App& dlrun);
Command add_init_command(CLI::App& dlrun);
Command add_run_command(CLI::App& dlrun);
Command add_agent_command(CLI::App& dlrun);
Command add_slurm_run_command(CLI::App& dlrun);
Command add_submit_command(CLI::App& dlrun);
Command add_status_command(CLI::App& dlrun);
Command add_logs_command(CLI::App& dlrun);
Command add_cancel_command(CLI::App& dlrun);
Command add_resize_command(CLI::App& dlrun);
Command add_supervise_command(CLI::App& dlrun);
Command add_schedule_command(CLI::App& dlrun);

// The "Usage:" line CLI11 cannot derive for commands that end in a program to run.
void set_usage(const CLI::App* app, std::string usage);

// Prints usage lines registered with set_usage(); otherwise CLI11's own.
class Formatter : public CLI::Formatter {
 public:
  std::string make_usage(const CLI::App* app, std::string name) const override;
};

}  // namespace dlrun::cli
