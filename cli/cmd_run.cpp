// `dlrun run --hosts …`: one job across machines over ssh; and `dlrun agent`, its part
// on each machine (started by `run`, never by hand).

#include <fstream>
#include <memory>
#include <sstream>

#include <fmt/format.h>

#include "commands.hpp"
#include "dlrun/launcher/cluster_job.hpp"
#include "dlrun/error.hpp"
#include "dlrun/launcher/process.hpp"
#include "dlrun/launcher/slurm.hpp"
#include "dlrun/launcher/text.hpp"
#include "group_options.hpp"

namespace dlrun::cli {
namespace {

struct RunArgs {
  GroupArgs group;
  launcher::ClusterOptions cluster;
  std::string hosts;
  std::string hostfile;
  std::string ssh_options;
};

int run_run(RunArgs& args, CLI::App& app, const Trailing& trailing) {
  apply_group_options(args.group, app);
  auto& c = args.cluster;
  c.group = args.group.options;
  c.group.command = program_words(app, trailing);
  if (app.count("--hosts") == app.count("--hostfile")) {
    throw ConfigError("say where to run: --hosts a:4,b:4 or --hostfile FILE (one of them)");
  }
  if (app.count("--hosts")) {
    c.hosts = launcher::parse_host_list(args.hosts);
  } else {
    std::ifstream file(args.hostfile);
    if (!file) throw ConfigError(fmt::format("--hostfile {}: cannot read it", args.hostfile));
    std::stringstream text;
    text << file.rdbuf();
    c.hosts = launcher::parse_hostfile(text.str(), args.hostfile);
  }
  if (c.group.grace_seconds < 0) throw ConfigError("--grace: must be 0 or more seconds");
  launcher::raise_fd_limit();
  return launcher::run_cluster_job(c, launcher::current_environment());
}

struct AgentArgs {
  GroupArgs group;
  launcher::AgentOptions agent;
  std::string rendezvous;
  int nproc = 0;
  int gpus = 0;
  bool node_from_slurm = false;
};

struct SlurmRunArgs {
  GroupArgs group;
  launcher::SlurmStepOptions step;
};

int run_slurm_step_command(SlurmRunArgs& args, CLI::App& app, const Trailing& trailing) {
  apply_group_options(args.group, app);
  auto& step = args.step;
  step.cluster.group = args.group.options;
  step.cluster.group.command = program_words(app, trailing);
  step.cluster.group.prefix = "[{host}:{rank}] ";
  step.cluster.group.color = launcher::ColorMode::never;
  return launcher::run_slurm_step(step, launcher::current_environment());
}

int run_agent_command(AgentArgs& args, CLI::App& app, const Trailing& trailing) {
  apply_group_options(args.group, app);
  auto& a = args.agent;
  a.group = args.group.options;
  a.group.command = program_words(app, trailing);
  auto colon = args.rendezvous.rfind(':');
  auto port = colon == std::string::npos ? std::nullopt : launcher::parse_int(args.rendezvous.substr(colon + 1));
  if (!port) throw ConfigError(fmt::format("--rendezvous {}: expected HOST:PORT", args.rendezvous));
  a.rendezvous_host = args.rendezvous.substr(0, colon);
  a.rendezvous_port = *port;
  if (args.node_from_slurm) {
    auto env = launcher::current_environment();
    auto node = launcher::parse_int(env["SLURM_NODEID"]);
    if (!node) throw ConfigError("--node-from-slurm: SLURM_NODEID is not set (is this inside srun?)");
    a.node = *node;
    a.host_label = env["SLURMD_NODENAME"].empty() ? fmt::format("node{}", *node) : env["SLURMD_NODENAME"];
  } else if (!app.count("--node")) {
    throw ConfigError("--node N or --node-from-slurm is required");
  }
  if (app.count("--nproc")) a.group.nproc = args.nproc;
  if (app.count("--gpus")) a.group.gpus = std::to_string(args.gpus);
  return launcher::run_agent(a, launcher::current_environment());
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
  set_usage(app, "dlrun run (--hosts H:N,… | --hostfile FILE) [OPTIONS] [--] PROGRAM [ARGS...]");
  auto& c = args->cluster;
  app->add_option("--hosts", args->hosts, "Hosts and ranks on each: a:4,b:4 (user@host works; localhost runs without ssh)")
      ->type_name("LIST");
  app->add_option("--hostfile", args->hostfile, "A file of 'HOST slots=N' lines; # starts a comment")->type_name("FILE");
  app->add_flag("--gpu", c.gpu_slots, "Each slot is a GPU: one rank per GPU, with its own CUDA_VISIBLE_DEVICES");
  app->add_option("--master-addr", c.master_addr,
                  "MASTER_ADDR for every rank (default: the address rank 0's host reaches this machine from)");
  app->add_option("--iface", c.iface, "Serve the rendezvous on this interface's address (default: the route to each host)")
      ->type_name("NAME");
  app->add_option("--ssh-config", c.ssh.config_file, "ssh client configuration file (ssh -F)")->type_name("FILE");
  app->add_option("--ssh-option", c.ssh.options, "An ssh option (ssh -o), may be repeated")->type_name("OPTION");
  app->add_option("--connect-timeout", c.ssh.connect_timeout_seconds, "Seconds to wait for each host's ssh")
      ->capture_default_str();
  app->add_option("--join-timeout", c.join_timeout, "Seconds for every host's agent to join the rendezvous")
      ->capture_default_str();
  app->add_option("--remote-dlrun", c.remote_dlrun, "dlrun's path on the other hosts (default: this one's)")
      ->type_name("PATH");
  add_output_options(app, args->group);
  add_failure_options(app, args->group);
  args->group.options.prefix = "[{host}:{rank}] ";
  app->footer(
      "Before starting anything, every host is checked over ssh at once (BatchMode: keys, no passwords); all "
      "unreachable hosts are named. Ranks get the env of dlrun local with global RANK, NODE_RANK and a MASTER_ADDR "
      "the other hosts reach. Exit code: the failing rank's own, 69 if hosts cannot be reached or do not join "
      "(docs/run.md).");
  return {app, [args, app](const Trailing& trailing) { return run_run(*args, *app, trailing); }};
}

Command add_agent_command(CLI::App& dlrun) {
  auto args = std::make_shared<AgentArgs>();
  CLI::App* app = dlrun.add_subcommand("agent", "Internal: one host's part of a dlrun run job (started by dlrun run)");
  app->group("");  // hidden: started over ssh by dlrun run, with the secret on stdin
  app->prefix_command();
  auto& a = args->agent;
  app->add_option("--rendezvous", args->rendezvous, "HOST:PORT of the launcher's rendezvous")->required();
  app->add_option("--node", a.node);
  app->add_flag("--node-from-slurm", args->node_from_slurm);
  app->add_option("--round", a.round);
  app->add_option("--host-label", a.host_label);
  app->add_option("--job-id", a.job_id);
  app->add_option("--workdir", a.workdir);
  app->add_option("--master-addr", a.master_addr);
  app->add_option("--nproc", args->nproc);
  app->add_option("--gpus", args->gpus);
  add_output_options(app, args->group);
  add_failure_options(app, args->group);
  return {app, [args, app](const Trailing& trailing) { return run_agent_command(*args, *app, trailing); }};
}

Command add_slurm_run_command(CLI::App& dlrun) {
  auto args = std::make_shared<SlurmRunArgs>();
  CLI::App* app = dlrun.add_subcommand("_slurm-run", "Internal: the batch step of a dlrun job on Slurm");
  app->group("");
  app->prefix_command();
  auto& step = args->step;
  app->add_option("--job-id", step.job_id)->required();
  app->add_option("--ranks-per-node", step.ranks_per_node)->required();
  app->add_flag("--gpu", step.cluster.gpu_slots);
  app->add_option("--join-timeout", step.cluster.join_timeout);
  add_output_options(app, args->group);
  add_failure_options(app, args->group);
  return {app, [args, app](const Trailing& trailing) { return run_slurm_step_command(*args, *app, trailing); }};
}

}  // namespace dlrun::cli
