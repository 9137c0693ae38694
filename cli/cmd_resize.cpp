// `dlrun resize JOB N`: change the rank count of a running elastic job.

#include <iostream>
#include <memory>

#include "commands.hpp"
#include "dlrun/launcher/job_ref.hpp"
#include "dlrun/launcher/job_resize.hpp"
#include "dlrun/error.hpp"
#include "dlrun/launcher/process.hpp"
#include "dlrun/launcher/text.hpp"

#include <fmt/format.h>

namespace dlrun::cli {
namespace {

struct ResizeArgs {
  std::string job;
  std::string ranks;
  bool force = false;
};

int run_resize(const ResizeArgs& args) {
  std::optional<int> ranks;
  if (args.ranks != "auto") {
    ranks = launcher::parse_int(args.ranks);
    if (!ranks) {
      throw ConfigError(fmt::format("RANKS: expected a number of ranks or 'auto', not '{}'", args.ranks));
    }
  }
  const auto unannounced = args.force ? launcher::Unannounced::restart : launcher::Unannounced::refuse;
  const auto result =
      launcher::resize_job(launcher::parse_job_ref(args.job), ranks, unannounced, launcher::current_environment());
  const auto outcome = result.outcome;
  if (outcome == launcher::ResizeOutcome::unpinned) {
    std::cout << "Job " << args.job << " is sized by the goodput scheduler again\n";
    return 0;
  }
  // A goodput job stays at the size given: said, with the way back (it looked like nothing changed).
  const std::string pinned =
      result.pinned > 0
          ? fmt::format("; the goodput scheduler leaves it at {} until 'dlrun resize {} auto'", result.pinned, result.job)
          : std::string();
  if (outcome == launcher::ResizeOutcome::unchanged) {
    std::cout << "Job " << args.job << " already runs " << *ranks << (*ranks == 1 ? " rank" : " ranks")
              << " (nothing was stopped)" << pinned << "\n";
    return 0;
  }
  std::cout << "Job " << args.job << " now runs " << *ranks << (*ranks == 1 ? " rank" : " ranks");
  if (outcome == launcher::ResizeOutcome::restarted) {
    std::cout << " (restarted: its program does not handle the stop request, so it starts again from its "
                 "last checkpoint, if it saves one)";
  }
  if (outcome == launcher::ResizeOutcome::killed) {
    std::cout << " (its ranks did not stop at a step within the grace period: they were killed, and start again "
                 "from their last checkpoint, if they saved one; does the program ask ctx.stop_requested() after "
                 "every step?)";
  }
  std::cout << pinned << "\n";
  return 0;
}

}  // namespace

Command add_resize_command(CLI::App& dlrun) {
  auto args = std::make_shared<ResizeArgs>();
  CLI::App* app = dlrun.add_subcommand(
      "resize",
      "Change the number of ranks of a running elastic job (started with MIN:MAX ranks): the ranks "
      "checkpoint, stop at the same step, and restart with the new count. Only a program that handles the "
      "stop request (the dlrun runtime does) is resized so; see --force");
  app->add_option("JOB", args->job, "A job's number (dlrun local prints it: 'dlrun: job N') or name")
      ->required();
  app->add_option("RANKS", args->ranks,
                  "The new number of ranks, within the job's MIN:MAX. A submitted job the goodput scheduler "
                  "sizes keeps it until 'dlrun resize JOB auto' hands it back to the scheduler")
      ->required();
  app->add_flag("--force", args->force,
                "Resize a job whose program has not said that it handles the stop request (docs/elastic.md): "
                "its ranks are stopped (SIGTERM, SIGKILL after its grace period) and start again at the new "
                "size, from their last checkpoint if they save one. Without it such a resize is refused");
  app->footer("Exit code: 0 once the job runs at the new size; 3 when its program has not said that it handles "
              "the stop request (nothing was done: --force restarts it); 2 for a job that cannot be resized; 75 "
              "for one between two sizes (another resize, a restart): try again in a moment (docs/exit-codes.md).");
  return {app, [args](const Trailing&) { return run_resize(*args); }};
}

}  // namespace dlrun::cli
