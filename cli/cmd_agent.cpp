// `dlrun agent` (hidden): one host's part of a `dlrun run` job, started by it over ssh with the
// rendezvous secret on stdin; never by hand. Its command line says only where to meet and
// which node it is: what it runs comes in the rendezvous's assignment (agent_plan.hpp). The
// work is launcher::run_agent (agent.cpp).

#include <memory>

#include <fmt/format.h>

#include "commands.hpp"
#include "dlrun/error.hpp"
#include "dlrun/launcher/cluster_job.hpp"
#include "dlrun/launcher/process.hpp"
#include "dlrun/launcher/text.hpp"

namespace dlrun::cli {
namespace {

struct AgentArgs {
  launcher::AgentOptions agent;
  std::string rendezvous;
  bool node_from_slurm = false;
};

int run_agent_command(AgentArgs& args, CLI::App& app) {
  auto& a = args.agent;
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
  return launcher::run_agent(a, launcher::current_environment());
}

}  // namespace

Command add_agent_command(CLI::App& dlrun) {
  auto args = std::make_shared<AgentArgs>();
  CLI::App* app = dlrun.add_subcommand("agent", "Internal: one host's part of a dlrun run job (started by dlrun run)");
  app->group("");  // hidden: started over ssh by dlrun run, with the secret on stdin
  auto& a = args->agent;
  app->add_option("--rendezvous", args->rendezvous, "HOST:PORT of the launcher's rendezvous")->required();
  app->add_option("--node", a.node);
  app->add_flag("--node-from-slurm", args->node_from_slurm);
  app->add_option("--round", a.round);
  app->add_option("--host-label", a.host_label);
  app->add_option("--master-addr", a.master_addr);
  return {app, [args, app](const Trailing&) { return run_agent_command(*args, *app); }};
}

}  // namespace dlrun::cli
