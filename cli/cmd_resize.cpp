// `dlrun resize JOB N`: change the rank count of a running elastic job.

#include <iostream>
#include <memory>

#include "commands.hpp"
#include "dlrun/launcher/job_resize.hpp"
#include "dlrun/launcher/process.hpp"

namespace dlrun::cli {
namespace {

struct ResizeArgs {
  std::string job;
  int ranks = 0;
};

int run_resize(const ResizeArgs& args) {
  launcher::resize_job(launcher::parse_job_ref(args.job), args.ranks, launcher::current_environment());
  std::cout << "Job " << args.job << " now runs " << args.ranks << (args.ranks == 1 ? " rank\n" : " ranks\n");
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
  app->add_option("RANKS", args->ranks, "The new number of ranks, within the job's MIN:MAX")->required();
  return {app, [args](const Trailing&) { return run_resize(*args); }};
}

}  // namespace dlrun::cli
