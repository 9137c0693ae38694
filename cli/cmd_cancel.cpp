// `dlrun cancel JOB…`: stop jobs, gracefully, then by force.

#include <iostream>
#include <memory>
#include <vector>

#include "commands.hpp"
#include "dlrun/launcher/job_queue.hpp"
#include "dlrun/launcher/job_ref.hpp"
#include "dlrun/launcher/process.hpp"

namespace dlrun::cli {
namespace {

struct CancelArgs {
  std::vector<std::string> jobs;
  bool force = false;
};

int run_cancel(const CancelArgs& args) {
  launcher::JobQueue queue(launcher::current_environment());
  std::vector<int64_t> ids;
  for (const auto& job : args.jobs) ids.push_back(launcher::job_number(queue.store(), launcher::parse_job_ref(job), "cancel"));
  for (int64_t id : ids) {
    auto before = queue.store().get(id);
    auto state = queue.cancel(id, args.force);
    if (before && launcher::is_terminal(before->state)) {
      std::cout << "Job " << id << " had already ended (" << launcher::to_string(state) << ")\n";
    } else {
      std::cout << "Job " << id << " " << launcher::to_string(state) << "\n";
    }
  }
  return 0;
}

}  // namespace

Command add_cancel_command(CLI::App& dlrun) {
  auto args = std::make_shared<CancelArgs>();
  CLI::App* app = dlrun.add_subcommand(
      "cancel",
      "Stop jobs: a pending job leaves the queue (listed as CANCELLED); a running job's ranks get SIGTERM, then "
      "SIGKILL after the job's grace period");
  app->add_option("JOB", args->jobs, "Jobs' numbers or names, submitted or run by dlrun local or run (dlrun status "
                                      "lists them)")
      ->required();
  app->add_flag("--force", args->force, "Kill the ranks at once (SIGKILL)");
  app->footer("Exit codes: 0 every job named is cancelled (or had already ended); 1 a job could not be stopped; "
              "2 no such job, or another user's (docs/exit-codes.md).");
  return {app, [args](const Trailing&) { return run_cancel(*args); }};
}

}  // namespace dlrun::cli
