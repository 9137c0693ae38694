// dlrun: the command-line entry point. Parses, dispatches to one subcommand, and is the
// single place where errors are caught, printed as `dlrun: error: …` and turned into the
// exit codes of docs/exit-codes.md.

#include <signal.h>
#include <cstdlib>
#include <cstring>
#include <filesystem>

#include <iostream>
#include <vector>

#include <CLI/CLI.hpp>
#include <fmt/format.h>

#include "commands.hpp"
#include "dlrun/error.hpp"
#include "dlrun/launcher/private_files.hpp"
#include "dlrun/launcher/process.hpp"
#include "dlrun/log.hpp"
#include "dlrun/version.hpp"
#include "dlrun/protocol.hpp"

namespace {

// Every verb's usage errors read alike: what was wrong (an unknown option or command named
// with the closest one, before CLI11's own complaints, which it may have caused), and where
// to read more.
int usage_error(const CLI::ParseError& error, const CLI::App& where) {
  std::string message =
      dlrun::cli::unexpected_words_message(where).value_or(dlrun::cli::plain_parse_error(error.what()));
  std::cerr << "dlrun: error: " << message << dlrun::cli::help_hint(where) << "\n";
  return dlrun::exit_code::k_usage;
}

// The subcommand the user was in when parsing failed, for the --help hint.
const CLI::App* innermost(const CLI::App& app) {
  for (const CLI::App* sub : app.get_subcommands()) return innermost(*sub);
  return &app;
}

}  // namespace

namespace {

// A relative DLRUN_HOME named another directory in every process that runs elsewhere (a
// submitted job's supervisor and ranks run in its workdir): it is made absolute once, here,
// before anything reads it, and every process dlrun starts inherits that.
void make_home_absolute() {
  const char* home = std::getenv(dlrun::env::k_home);
  if (home == nullptr || *home == '\0' || *home == '/') return;
  std::error_code ec;
  const auto absolute = std::filesystem::absolute(home, ec).lexically_normal();
  if (!ec) ::setenv(dlrun::env::k_home, absolute.c_str(), 1);
}

}  // namespace

int main(int argc, char** argv) {
  ::signal(SIGPIPE, SIG_IGN);  // a closed stdout must not kill the supervisor of live ranks
  // The verbs that supervise ranks pass SIGUSR1/SIGUSR2 on to them: from the first instant, one
  // waits for the supervisor (Supervisor::begin unblocks them) instead of ending dlrun.
  if (argc > 1 && (std::strcmp(argv[1], "local") == 0 || std::strcmp(argv[1], "run") == 0 ||
                   std::strcmp(argv[1], "_slurm-run") == 0)) {
    dlrun::launcher::block_passed_signals();
  }
  make_home_absolute();
  dlrun::log::init_from_env();

  CLI::App app("dlrun launches distributed deep-learning training: one rank per GPU or CPU "
               "slot, output kept per rank, the whole group stopped when one rank fails.",
               "dlrun");
  app.set_version_flag("--version", fmt::format("dlrun {}", dlrun::k_version),
                       "Print the version and exit");
  app.require_subcommand(1);
  app.formatter(std::make_shared<dlrun::cli::Formatter>());
  app.footer("Run 'dlrun COMMAND --help' for a command's options. Exit codes: docs/exit-codes.md.");

  dlrun::cli::set_invocation(std::vector<std::string>(argv + 1, argv + argc));
  std::vector<dlrun::cli::Command> commands;
  commands.push_back(dlrun::cli::add_local_command(app));
  commands.push_back(dlrun::cli::add_run_command(app));
  commands.push_back(dlrun::cli::add_agent_command(app));
  commands.push_back(dlrun::cli::add_slurm_run_command(app));
  commands.push_back(dlrun::cli::add_submit_command(app));
  commands.push_back(dlrun::cli::add_status_command(app));
  commands.push_back(dlrun::cli::add_logs_command(app));
  commands.push_back(dlrun::cli::add_history_command(app));
  commands.push_back(dlrun::cli::add_wait_command(app));
  commands.push_back(dlrun::cli::add_cancel_command(app));
  commands.push_back(dlrun::cli::add_clean_command(app));
  commands.push_back(dlrun::cli::add_resize_command(app));
  commands.push_back(dlrun::cli::add_init_command(app));
  commands.push_back(dlrun::cli::add_supervise_command(app));
  commands.push_back(dlrun::cli::add_schedule_command(app));

  // Cut the command line at the first "--": CLI11 sees only what comes before it, and a verb
  // that runs a program takes what follows as the program. A verb that runs none (status,
  // resize, …) leaves "--" to CLI11, which takes what follows as positionals: `dlrun resize --
  // JOB -1` asks for -1 ranks, it does not lose JOB.
  dlrun::cli::Trailing trailing;
  std::vector<std::string> words;
  for (int i = argc - 1; i >= 1; --i) words.emplace_back(argv[i]);  // CLI11 wants them reversed
  const CLI::App* verb = nullptr;
  if (argc > 1) {
    try {
      verb = app.get_subcommand(argv[1]);
    } catch (const CLI::OptionNotFound&) {
    }
  }
  for (size_t i = (verb && !verb->get_prefix_command()) ? 0 : words.size(); i-- > 0;) {
    if (words[i] == "--") {
      trailing.present = true;
      for (size_t j = i; j-- > 0;) trailing.words.push_back(words[j]);
      words.erase(words.begin(), words.begin() + static_cast<long>(i) + 1);
      break;
    }
  }

  try {
    app.parse(words);
  } catch (const CLI::CallForHelp& e) {
    return app.exit(e);
  } catch (const CLI::CallForAllHelp& e) {
    return app.exit(e);
  } catch (const CLI::CallForVersion& e) {
    return app.exit(e);
  } catch (const CLI::RequiredError& e) {
    if (argc == 1) {
      std::cerr << app.help();
      return dlrun::exit_code::k_usage;
    }
    return usage_error(e, *innermost(app));
  } catch (const CLI::ParseError& e) {
    return usage_error(e, *innermost(app));
  }

  try {
    for (auto& command : commands) {
      if (!command.app->parsed()) continue;
      dlrun::cli::refuse_empty_values(*command.app);
      // A project skeleton from `dlrun init` is the user's own: made as their umask says.
      if (command.app->get_name() != "init") dlrun::launcher::keep_files_private(dlrun::launcher::current_environment());
      return command.run(trailing);
    }
    return dlrun::exit_code::k_usage;
  } catch (const dlrun::Error& e) {
    // A message may list several problems, one per line (job.toml checks).
    std::string message = e.what();
    size_t start = 0;
    do {
      size_t end = message.find('\n', start);
      // An agent's says which host it is on ("dlrun[node2]: error: …"): its words reach the
      // launcher's terminal among the other hosts'.
      std::cerr << dlrun::log::prefix() << "error: " << message.substr(start, end - start) << "\n";
      start = end == std::string::npos ? end : end + 1;
    } while (start != std::string::npos);
    return e.exit_code();
  } catch (const std::exception& e) {
    std::cerr << dlrun::log::prefix() << "error: internal: " << e.what() << "\n";
    return dlrun::exit_code::k_internal;
  }
}
