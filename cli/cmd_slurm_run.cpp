// `dlrun _slurm-run` (hidden): the batch step of a job submitted with --scheduler slurm, run by
// sbatch; never by hand. The work is launcher::run_slurm_step (slurm_step.cpp).

#include <memory>

#include "commands.hpp"
#include "dlrun/launcher/process.hpp"
#include "dlrun/launcher/slurm.hpp"
#include "group_options.hpp"

namespace dlrun::cli {
namespace {

struct SlurmRunArgs {
  GroupArgs group;
  launcher::SlurmStepOptions step;
};

int run_slurm_step_command(SlurmRunArgs& args, CLI::App& app, const Trailing& trailing) {
  apply_group_options(args.group, app, trailing);
  auto& step = args.step;
  step.cluster.plan = args.group.options;
  step.cluster.plan.prefix = "[{host}:{rank}] ";
  step.cluster.plan.color = launcher::ColorMode::never;
  return launcher::run_slurm_step(step, launcher::current_environment());
}

}  // namespace

Command add_slurm_run_command(CLI::App& dlrun) {
  auto args = std::make_shared<SlurmRunArgs>();
  CLI::App* app = dlrun.add_subcommand("_slurm-run", "Internal: the batch step of a dlrun job on Slurm");
  app->group("");
  app->prefix_command();
  auto& step = args->step;
  app->add_option("--job-id", step.job_id)->required();
  app->add_option("--ranks-per-node", step.ranks_per_node)->required();
  app->add_option("--workdir", step.workdir);
  app->add_flag("--gpu", step.cluster.gpu_slots);
  app->add_option("--join-timeout", step.cluster.join_timeout)->check(duration_check());
  app->add_option("--log-dir", args->group.options.log_dir);  // job.toml log_dir/ID
  add_output_options(app, args->group);
  add_failure_options(app, args->group);
  return {app, [args, app](const Trailing& trailing) { return run_slurm_step_command(*args, *app, trailing); }};
}

}  // namespace dlrun::cli
