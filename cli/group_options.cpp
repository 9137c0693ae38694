#include "group_options.hpp"

#include <unistd.h>

#include "dlrun/error.hpp"
#include "dlrun/launcher/command_resolution.hpp"
#include "dlrun/launcher/duration_limit.hpp"
#include "dlrun/log.hpp"
#include "dlrun/launcher/text.hpp"

namespace dlrun::cli {

CLI::Validator duration_check() {
  return CLI::Validator(
      [](std::string& text) {
        double seconds = 0;
        if (!CLI::detail::lexical_cast(text, seconds)) return std::string();  // CLI11 says it is not a number
        return launcher::duration_problem(seconds, text).value_or("");
      },
      "");  // the options' type_name says SECONDS
}

void add_program_options(CLI::App* app, GroupArgs& args) {
  app->add_flag("-m,--module", args.module,
                "PROGRAM is a Python module: run python3 -m PROGRAM ARGS (as torchrun -m)");
  app->add_flag("--no-python,--no_python", args.no_python,
                "Run PROGRAM as it is, also a .py file (by its #! line), not with python3 from PATH (as torchrun "
                "--no-python)");
}

void add_output_options(CLI::App* app, GroupArgs& args) {
  auto& o = args.options;
  app->add_option("--run-dir", o.run_dir,
                  "Directory for rank-N.log, job.json and the runtime's files "
                  "(default: $DLRUN_HOME/runs/JOB_ID, DLRUN_HOME=$XDG_STATE_HOME/dlrun or ~/.local/state/dlrun)")
      ->type_name("DIR");
  app->add_option("--prefix", o.prefix,
                  "Template before each output line: {rank} {local_rank} {node_rank} {host} {world_size}")
      ->capture_default_str();
  app->add_flag("--no-prefix", args.no_prefix, "Print ranks' lines without a prefix");
  app->add_option("--ranks", args.ranks, "Show only these ranks on the terminal, e.g. 0 or 0,3 or 0-3 (all are logged)")
      ->type_name("LIST");
  app->add_option("--color", args.color, "Colour the prefixes: auto (on a terminal, unless NO_COLOR), always, never")
      ->check(CLI::IsMember({"auto", "always", "never"}))
      ->capture_default_str();
  app->add_option("--tail", o.tail_lines,
                  "Lines of a failed rank's stderr to show (a traceback from its error file: whole, up to 100 lines; "
                  "0: neither)")
      ->type_name("N")
      ->capture_default_str()
      ->check(CLI::Range(0, 100000));
  app->add_flag("-q,--quiet", o.quiet, "No informational lines from dlrun itself (its warnings and errors still)");
}

void add_failure_options(CLI::App* app, GroupArgs& args) {
  auto& o = args.options;
  app->add_option("--grace", o.grace_seconds, "Seconds between SIGTERM and SIGKILL when stopping ranks")
      ->check(duration_check())
      ->type_name("SECONDS")
      ->capture_default_str();
  app->add_option("--max-restarts,--max_restarts", o.max_restarts,
                  "Restart the whole group up to K times after a rank fails (counted for the job)")
      ->type_name("K")
      ->capture_default_str();
  app->add_option("--watchdog", o.watchdog_seconds,
                  "A rank that reports no progress (DLRUN_PROGRESS_FILE, the runtime does it every step; a "
                  "program that never touches it: the output of any rank) for this many seconds counts as failed; 0: off")
      ->check(duration_check())
      ->type_name("SECONDS")
      ->capture_default_str();
}

void apply_group_options(GroupArgs& args, const CLI::App& app, const Trailing& trailing) {
  auto& options = args.options;
  options.command = program_words(app, trailing);
  if (args.module && args.no_python) throw ConfigError("-m and --no-python: a module runs with python3; give one of them");
  if (args.module) options.command = launcher::python_module_command(options.command);
  if (args.no_python && !options.command.empty() && launcher::is_python_script(options.command.front())) {
    // env execs the script itself: the kernel reads its #! line (a .py alone runs with python3).
    // A bare name is the file here, as a .py script's is (env would look for it in PATH).
    std::string& script = options.command.front();
    if (script.find('/') == std::string::npos && ::access(script.c_str(), F_OK) == 0) script = "./" + script;
    options.command.insert(options.command.begin(), "env");
  }
  if (app.count("--ranks")) options.shown_ranks = launcher::parse_int_list(args.ranks, "--ranks");
  options.prefix_enabled = !args.no_prefix;
  if (options.quiet && dlrun::log::level() < dlrun::log::Level::warn) dlrun::log::set_level(dlrun::log::Level::warn);
  options.color = args.color == "always"  ? launcher::ColorMode::always
                  : args.color == "never" ? launcher::ColorMode::never
                                          : launcher::ColorMode::automatic;
}

}  // namespace dlrun::cli
