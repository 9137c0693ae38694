// `dlrun submit JOB.toml`: queue a job on this machine and return at once.

#include <iostream>
#include <memory>

#include "commands.hpp"
#include "dlrun/error.hpp"
#include "dlrun/launcher/job_queue.hpp"
#include "dlrun/launcher/process.hpp"

namespace dlrun::cli {
namespace {

struct SubmitArgs {
  std::string job_file;
  bool parsable = false;
  bool wait = false;
  bool dry_run = false;
  std::string scheduler;
};

int run_submit(const SubmitArgs& args) {
  launcher::JobQueue queue(launcher::current_environment());
  if (args.dry_run) {
    std::cout << queue.sbatch_script(args.job_file, args.scheduler);
    return 0;
  }
  int64_t id = queue.submit(args.job_file, args.scheduler);
  if (args.parsable) {
    std::cout << id << std::endl;
  } else {
    std::cout << "Submitted job " << id << " (dlrun status " << id << ", dlrun logs " << id << " -f)" << std::endl;
  }
  queue.sweep();
  if (!args.wait) return 0;
  return queue.wait(id);
}

}  // namespace

Command add_submit_command(CLI::App& dlrun) {
  auto args = std::make_shared<SubmitArgs>();
  CLI::App* app = dlrun.add_subcommand(
      "submit",
      "Queue a job (job.toml) on this machine and return; it runs detached when its GPUs or CPU "
      "slots are free.\n"
      "  dlrun submit job.toml               prints the job id\n"
      "  id=$(dlrun submit --parsable job.toml)\n"
      "  dlrun submit --wait job.toml        for CI: exit with the job's exit code");
  app->add_option("JOB_FILE", args->job_file, "The job file (docs/job-toml.md)")->required();
  app->add_flag("--parsable", args->parsable, "Print only the job id");
  app->add_flag("--wait", args->wait, "Wait for the job to end and exit with its exit code");
  app->add_option("--scheduler", args->scheduler, "Override [scheduler] kind: local, ssh or slurm")
      ->check(CLI::IsMember({"local", "ssh", "slurm"}));
  app->add_flag("--dry-run", args->dry_run, "Slurm: print the sbatch script instead of submitting it");
  app->footer("The job's state, logs and run directories are under $DLRUN_HOME (default ~/.local/state/dlrun).");
  return {app, [args](const Trailing&) { return run_submit(*args); }};
}

}  // namespace dlrun::cli
