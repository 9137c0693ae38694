#pragma once
// The subcommands of the dlrun executable. Each cmd_<verb>.cpp registers its options on
// the CLI11 app and returns the function that runs it once parsing succeeded; the work
// itself is in the launcher library. main.cpp is the one place that catches and prints.

#include <functional>
#include <optional>
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
// When one of `options` (long names of `app`'s, "--nproc") follows the program's name in
// `program`, and so went to the program: the command line with it (and its value) moved in
// front of the program ("dlrun local --nproc 2 true"). For the error that what it set is missing.
std::optional<std::string> misplaced_option(const std::vector<std::string>& program, const CLI::App& app,
                                            const std::vector<std::string>& options);

// Usage errors read the same for every verb: "unknown option '--jsn' (did you mean
// '--json'?)", "unknown command 'lcoal' (did you mean 'local'?)", then help_hint().
std::string unknown_option_message(const std::string& word, const CLI::App& app);
// What CLI11 could not place among `app`'s words, as such a message; nothing when all fit
// (or `app` ends in a program, whose words are its own).
std::optional<std::string> unexpected_words_message(const CLI::App& app);
// Throws ConfigError naming an option given '' (which CLI11 takes as 0 or nothing).
void refuse_empty_values(const CLI::App& app);
// "; see 'dlrun local --help'" ("dlrun --help" for dlrun itself).
std::string help_hint(const CLI::App& app);

// CLI11's own wording of a bad value, in dlrun's: "Could not convert: --port = abc" becomes
// "--port abc: not a number"; "--n: Value -1 not in range 0.000000 to 10.000000" becomes
// "--n -1: must be from 0 to 10" (or "must be 0 or more" without an upper bound); "--n: At
// Most 1 required but received 2" becomes "--n given more than once". Other messages come
// back as they are.
std::string plain_parse_error(const std::string& message);

// The picture of --svg PATH written whole or not at all (an earlier picture there stays as it
// was when the write fails); ConfigError "--svg PATH: cannot write PATH: reason".
void write_svg(const std::string& path, const std::string& svg);

// dlrun's own words (argv without its name), as main() got them: what a foreground run keeps
// to be resumed by (foreground.hpp).
void set_invocation(std::vector<std::string> words);
const std::vector<std::string>& invocation();

Command add_local_command(CLI::App& dlrun);
Command add_clean_command(CLI::App& dlrun);
Command add_init_command(CLI::App& dlrun);
Command add_run_command(CLI::App& dlrun);
Command add_agent_command(CLI::App& dlrun);
Command add_slurm_run_command(CLI::App& dlrun);
Command add_submit_command(CLI::App& dlrun);
Command add_status_command(CLI::App& dlrun);
Command add_logs_command(CLI::App& dlrun);
Command add_history_command(CLI::App& dlrun);
Command add_cancel_command(CLI::App& dlrun);
Command add_wait_command(CLI::App& dlrun);
Command add_resize_command(CLI::App& dlrun);
Command add_supervise_command(CLI::App& dlrun);
Command add_schedule_command(CLI::App& dlrun);

// The "Usage:" line CLI11 cannot derive for commands that end in a program to run.
void set_usage(const CLI::App* app, std::string usage);

// Prints usage lines registered with set_usage(); otherwise CLI11's own. Leaves out the
// spellings with '_' (torchrun's) of options that have one with '-'.
class Formatter : public CLI::Formatter {
 public:
  std::string make_usage(const CLI::App* app, std::string name) const override;
  std::string make_option_name(const CLI::Option* option, bool is_positional) const override;
};

}  // namespace dlrun::cli
