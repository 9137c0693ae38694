// `dlrun run --hosts …`: one job across machines over ssh. Its part on each machine is
// `dlrun agent` (cmd_agent.cpp).

#include <cerrno>
#include <cstring>
#include <fstream>
#include <memory>
#include <sstream>

#include <fmt/format.h>

#include "commands.hpp"
#include "dlrun/log.hpp"
#include "dlrun/launcher/job_environment.hpp"
#include "dlrun/launcher/cluster_job.hpp"
#include "dlrun/launcher/foreground_job.hpp"
#include "dlrun/launcher/gpu_selection.hpp"
#include "dlrun/error.hpp"
#include "dlrun/launcher/process.hpp"
#include "dlrun/launcher/text.hpp"
#include "foreground.hpp"
#include "group_options.hpp"

namespace dlrun::cli {
namespace {

struct RunArgs {
  GroupArgs group;
  ForegroundArgs foreground;
  launcher::ClusterOptions cluster;
  std::string hosts;
  std::string hostfile;
  std::string ssh_options;
  std::string gpu_ids;
  std::vector<std::string> env;
};

int run_run(RunArgs& args, CLI::App& app, const Trailing& trailing) {
  apply_group_options(args.group, app, trailing);
  auto& c = args.cluster;
  c.plan = args.group.options;
  run_again_if_resume_alone(args.foreground, app, launcher::JobOrigin::run, c.plan);
  if (app.count("--gpu-ids")) {
    c.gpu_ids = launcher::parse_gpu_ids(args.gpu_ids, "--gpu-ids");
    c.gpu_slots = true;
  }
  if (app.count("--hosts") == app.count("--hostfile")) {
    const bool resumed = !args.foreground.resume.empty();
    throw ConfigError(app.count("--hosts") == 0
                          ? resumed ? "say where to run: --hosts a:4,b:4 or --hostfile FILE (a command line given with "
                                      "--resume is the whole one: the hosts too; --resume JOB alone runs the job's own)"
                                    : "say where to run: --hosts a:4,b:4 or --hostfile FILE"
                          : "--hosts and --hostfile both say where to run: give one of them, not both");
  }
  if (app.count("--hosts")) {
    c.hosts = launcher::parse_host_list(args.hosts);
  } else {
    std::ifstream file(args.hostfile);
    if (!file) throw ConfigError(fmt::format("--hostfile {}: cannot read it: {}", args.hostfile, std::strerror(errno)));
    std::stringstream text;
    text << file.rdbuf();
    c.hosts = launcher::parse_hostfile(text.str(), args.hostfile);
  }
  c.job_env = launcher::forwarded_environment(launcher::current_environment(), args.env);
  for (const auto& pattern : launcher::unmatched_env_patterns(launcher::current_environment(), args.env)) {
    log::warn("-x {}: no variable of this shell starts with {}: nothing forwarded for it", pattern,
              pattern.substr(0, pattern.size() - 1));
  }
  if (args.foreground.resumed_alone) {
    // Its own command line again, whose hostfile is read anew: a file edited since changes the
    // world size, which the checkpoint takes, but the user should know.
    int world = 0;
    for (const auto& h : c.hosts) world += h.slots;
    const auto target = launcher::find_resume_target(launcher::current_environment(), args.foreground.resume,
                                                     launcher::JobOrigin::run);
    if (target.ranks > 0 && target.ranks != world) {
      log::warn("job {} ran {} rank{}; {} now gives {}: it resumes with {} (its checkpoint is restored at any size)",
                target.id, target.ranks, target.ranks == 1 ? "" : "s",
                app.count("--hostfile") ? "its hostfile " + args.hostfile : std::string("--hosts"), world, world);
    }
  }
  launcher::raise_fd_limit();
  // Held until the Supervisor's handlers exist (it lets them through): a Ctrl-C while the hosts
  // are checked killed dlrun outright, and the job was recorded as lost.
  const sigset_t stop = launcher::stop_signal_set();
  ::sigprocmask(SIG_BLOCK, &stop, nullptr);
  auto record = start_foreground(args.foreground, app, launcher::JobOrigin::run, c.plan, c.gpu_slots);
  c.job_id = record->job_id();
  c.attach = [&record](launcher::Plan& plan) { record->attach(plan); };
  try {
    return launcher::run_cluster_job(c, launcher::current_environment());
  } catch (const Error& e) {
    record->record_error(e.what(), e.exit_code());
    throw;
  }
}

}  // namespace

Command add_run_command(CLI::App& dlrun) {
  auto args = std::make_shared<RunArgs>();
  CLI::App* app = dlrun.add_subcommand(
      "run",
      "Start the ranks of a training program on several machines over ssh.\n"
      "  dlrun run --hosts a:4,b:4 ./train      4 ranks on a, 4 on b\n"
      "  dlrun run --hostfile hosts ./train     lines 'HOST slots=N' (Open MPI / DeepSpeed format)");
  app->prefix_command();
  set_usage(app, "dlrun run (--hosts H:N,… | --hostfile FILE) [OPTIONS] [-m] [--] PROGRAM [ARGS...]");
  auto& c = args->cluster;
  app->add_option("--hosts", args->hosts, "Hosts and ranks on each: a:4,b:4 (user@host works; localhost runs without ssh)")
      ->type_name("LIST");
  app->add_option("--hostfile", args->hostfile, "A file of 'HOST slots=N' lines; # starts a comment")->type_name("FILE");
  app->add_flag("--gpu", c.gpu_slots, "Each slot is a GPU: one rank per GPU, with its own CUDA_VISIBLE_DEVICES");
  app->add_option("--gpu-ids", args->gpu_ids,
                  "Slots are these GPUs, by number as nvidia-smi shows them, on every host: a host with N slots "
                  "runs its ranks on the first N (implies --gpu)")
      ->type_name("LIST");
  app->add_option("--master-addr", c.master_addr,
                  "MASTER_ADDR for every rank (default: the address rank 0's host reaches this machine from)");
  app->add_option("--iface", c.iface, "Serve the rendezvous on this interface's address (default: the route to each host)")
      ->type_name("NAME");
  app->add_option("-x,--env", args->env,
                  "Give the ranks on every host this variable: NAME=VALUE, NAME (as this shell has it) or PREFIX* "
                  "(quoted: 'WANDB_*'); may be repeated. This shell's NCCL_* go without it; other variables stay "
                  "here (horovodrun's -x)")
      ->type_name("NAME[=VALUE]")
      ->expected(1)
      ->allow_extra_args(false)
      ->multi_option_policy(CLI::MultiOptionPolicy::TakeAll);
  app->add_option("--ssh-config", c.ssh.config_file, "ssh client configuration file (ssh -F)")->type_name("FILE");
  // One word per --ssh-option: without expected(1) the words after it, the program's too, were taken.
  app->add_option("--ssh-option", c.ssh.options,
                  "One ssh option, as ssh -o takes it (ServerAliveInterval=5); repeat --ssh-option for each. It "
                  "comes before dlrun's own (ConnectTimeout, ServerAliveInterval), so it wins; BatchMode stays yes")
      ->type_name("KEY=VALUE")
      ->expected(1)
      ->allow_extra_args(false)
      ->multi_option_policy(CLI::MultiOptionPolicy::TakeAll);
  app->add_option("--connect-timeout", c.ssh.connect_timeout_seconds, "Seconds to wait for each host's ssh")
      ->type_name("SECONDS")
      ->check(duration_check())
      ->capture_default_str();
  app->add_option("--join-timeout", c.join_timeout, "Seconds for every host's agent to join the rendezvous")
      ->type_name("SECONDS")
      ->check(duration_check())
      ->capture_default_str();
  app->add_option("--remote-dlrun", c.remote_dlrun, "dlrun's path on the other hosts (default: this one's)")
      ->type_name("PATH");
  add_program_options(app, args->group);
  add_foreground_options(app, args->foreground);
  args->group.options.prefix = "[{host}:{rank}] ";  // before the option, whose help shows it
  add_output_options(app, args->group);
  add_failure_options(app, args->group);
  app->footer(
      "Before starting anything, every host is checked over ssh at once (BatchMode: keys, no passwords); all "
      "unreachable hosts are named. The program is found on each host as dlrun local finds it (PROGRAM.py runs "
      "with python3). Ranks get the env of dlrun local with global RANK, NODE_RANK and a MASTER_ADDR "
      "the other hosts reach. Exit code: the failing rank's own, 69 if hosts cannot be reached or do not join "
      "(docs/run.md).");
  return {app, [args, app](const Trailing& trailing) { return run_run(*args, *app, trailing); }};
}

}  // namespace dlrun::cli
