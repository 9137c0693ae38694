// `dlrun resize JOB N`: change the rank count of a running elastic job.

#include <iostream>
#include <memory>

#include "commands.hpp"
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
};

int run_resize(const ResizeArgs& args) {
  std::optional<int> ranks;
  if (args.ranks != "auto") {
    ranks = launcher::parse_int(args.ranks);
    if (!ranks) {
      throw ConfigError(fmt::format("RANKS: expected a number of ranks or 'auto', not '{}'", args.ranks));
    }
  }
  launcher::resize_job(launcher::parse_job_ref(args.job), ranks, launcher::current_environment());
  if (!ranks) {
    std::cout << "Job " << args.job << " is sized by the goodput scheduler again\n";
  } else {
    std::cout << "Job " << args.job << " now runs " << *ranks << (*ranks == 1 ? " rank\n" : " ranks\n");
  }
  return 0;
}

}  // namespace

Command add_resize_command(CLI::App& dlrun) {
  auto args = std::make_shared<ResizeArgs>();
  CLI::App* app = dlrun.add_subcommand(
      "resize",
      "Change the number of ranks of a running elastic job (started with MIN:MAX ranks): the ranks "
      "checkpoint, stop at the same step, and restart with the new count");
  app->add_option("JOB", args->job, "A submitted job's id, or the id dlrun local printed ('dlrun: job ID')")
      ->required();
  app->add_option("RANKS", args->ranks,
                  "The new number of ranks, within the job's MIN:MAX. A submitted job the goodput scheduler "
                  "sizes keeps it until 'dlrun resize JOB auto' hands it back to the scheduler")
      ->required();
  return {app, [args](const Trailing&) { return run_resize(*args); }};
}

}  // namespace dlrun::cli
