// The launching side of `dlrun run`; the agent side is in agent.cpp.

#include "dlrun/launcher/cluster_job.hpp"

#include "dlrun/launcher/agent_plan.hpp"

#include <unistd.h>

#include <filesystem>
#include <memory>

#include <fmt/format.h>
#include <fmt/ranges.h>

#include "dlrun/error.hpp"
#include "dlrun/log.hpp"
#include "dlrun/launcher/network.hpp"
#include "dlrun/launcher/process.hpp"
#include "dlrun/launcher/rendezvous.hpp"
#include "dlrun/launcher/rendezvous_admission.hpp"
#include "dlrun/launcher/run_dir.hpp"
#include "dlrun/launcher/supervisor.hpp"
#include "dlrun/launcher/text.hpp"
#include "dlrun/protocol.hpp"

namespace fs = std::filesystem;

namespace dlrun::launcher {
namespace {

std::string self_path() {
  std::error_code ec;
  auto path = fs::read_symlink("/proc/self/exe", ec);
  return ec ? std::string("dlrun") : path.string();
}

}  // namespace

// The agent's command line (after the program path): only where to meet and which node it
// is. node < 0: from Slurm's environment. What it runs comes in the assignment (host_plan).
std::vector<std::string> agent_args(const ClusterOptions& o, const Host& host, int node, int round,
                                    const std::string& rendezvous) {
  std::vector<std::string> args = {"agent", "--rendezvous", rendezvous, "--round", std::to_string(round)};
  if (node >= 0) {
    args.insert(args.end(), {"--node", std::to_string(node), "--host-label", host.name});
  } else {
    args.push_back("--node-from-slurm");
  }
  if (!o.master_addr.empty()) args.insert(args.end(), {"--master-addr", o.master_addr});
  return args;
}

std::string host_plan(const ClusterOptions& o, const Host& host, const std::string& job_id,
                      const std::string& run_dir, const std::string& workdir) {
  const auto& g = o.plan;
  AgentPlan plan;
  plan.job_id = job_id;
  plan.workdir = workdir;
  PlanOptions& p = plan.options;
  if (o.gpu_slots && !o.gpu_ids.empty()) {
    p.gpus = GpuRequest{std::nullopt, {o.gpu_ids.begin(), o.gpu_ids.begin() + host.slots}};
    p.gpus_label = fmt::format("--gpu-ids {}", fmt::join(o.gpu_ids, ","));
  } else if (o.gpu_slots) {
    p.gpus = GpuRequest{host.slots, {}};
    p.gpus_label = fmt::format("--gpu ({} on {})", counted(host.slots, "slot"), host.name);
  } else {
    p.nproc = host.slots;
  }
  p.run_dir = run_dir;
  p.log_dir = g.log_dir;
  p.grace_seconds = g.grace_seconds;
  p.watchdog_seconds = g.watchdog_seconds;  // each agent watches its own ranks
  p.max_restarts = g.max_restarts;  // for TORCHELASTIC_MAX_RESTARTS: the launcher restarts the hosts
  p.tail_lines = g.tail_lines;
  p.prefix = g.prefix;
  p.prefix_enabled = g.prefix_enabled;
  p.color = g.color == ColorMode::always ? ColorMode::always : ColorMode::never;
  p.quiet = g.quiet;
  p.shown_ranks = g.shown_ranks;
  p.command = g.command;
  plan.env = o.job_env;
  return format_agent_plan(plan);
}

int run_cluster_job(const ClusterOptions& in, const Environment& env) {
  ClusterOptions options = in;
  if (options.plan.command.empty()) {
    throw ConfigError("no program given: put the program to run after the options, e.g. dlrun run --hosts a:2,b:2 ./train");
  }
  mark_local_hosts(options.hosts, own_names());
  int world = 0;
  for (const auto& h : options.hosts) world += h.slots;
  if (!options.gpu_ids.empty()) {
    for (const auto& h : options.hosts) {
      if (h.slots > static_cast<int>(options.gpu_ids.size())) {
        throw ConfigError(fmt::format("--gpu-ids {} names {} GPU{}, and host {} has {} slots (one rank per GPU): give "
                                      "each host at most {} slots, or name more GPUs",
                                      fmt::join(options.gpu_ids, ","), options.gpu_ids.size(),
                                      options.gpu_ids.size() == 1 ? "" : "s", h.name, h.slots, options.gpu_ids.size()));
      }
    }
  }
  if (options.plan.shown_ranks) {
    for (int r : *options.plan.shown_ranks) {
      if (r >= world) throw ConfigError(fmt::format("--ranks: rank {} does not exist (ranks are 0 to {})", r, world - 1));
    }
  }
  PrefixTemplate check_prefix(options.plan.prefix);
  (void)check_prefix;
  // The agents write the prefixes, to pipes: whether this terminal wants colour is known here.
  if (options.plan.color == ColorMode::automatic) {
    options.plan.color = use_color(ColorMode::automatic, STDOUT_FILENO, env) ? ColorMode::always : ColorMode::never;
  }

  // Every host at once, every unreachable one named: never a silent hang. A stop signal
  // meanwhile (blocked by the caller until the Supervisor handles it) ends the check, and the
  // job before anything starts.
  auto unreachable = check_hosts(options.hosts, options.ssh, env);
  if (int signal = take_pending_stop_signal()) {
    log::error("stopped by {} while the hosts were being checked: nothing was started", signal_name(signal));
    return exit_code::k_signal_base + signal;
  }
  if (!unreachable.empty()) {
    std::string message = fmt::format("cannot reach {} of {} host{} over ssh (nothing was started):",
                                      unreachable.size(), options.hosts.size(), options.hosts.size() == 1 ? "" : "s");
    for (const auto& u : unreachable) message += "\n  " + u;
    throw Error(message, exit_code::k_unavailable);
  }

  // Where each host reaches this machine's rendezvous.
  const Host* first_remote = nullptr;
  for (const auto& h : options.hosts) {
    if (!h.local && !first_remote) first_remote = &h;
  }
  // A name that resolves only in ssh's configuration (an alias, a host behind a ProxyJump): the
  // address the host sees this machine connect from, as ssh tells it there.
  auto reached_from = [&](const Host& h) {
    try {
      return route_source_address(h.name);
    } catch (const ConfigError&) {
      if (auto seen = address_seen_by(h, options.ssh, env)) return *seen;
      throw;
    }
  };
  std::string outward = !options.iface.empty() ? interface_address(options.iface)
                        : first_remote         ? reached_from(*first_remote)
                                               : std::string("127.0.0.1");
  std::vector<std::string> contact;
  for (const auto& h : options.hosts) {
    contact.push_back(!options.iface.empty() || h.local ? outward : reached_from(h));
  }
  contact = contacts_all_can_reach(std::move(contact));

  std::vector<int> slots;
  std::vector<std::string> names;
  for (const auto& h : options.hosts) {
    slots.push_back(h.slots);
    names.push_back(h.name);
  }
  RendezvousServer server(random_secret(), slots, names, options.join_timeout);
  // Only where the hosts reach it: 127.0.0.1 for a job on this machine alone.
  server.start(rendezvous_bind_address(contact), 0);

  Plan job = launcher_job(options.plan, world, options.job_id.empty() ? make_job_id() : options.job_id, env);
  if (options.attach) options.attach(job);
  std::string workdir = fs::current_path().string();
  std::vector<std::string> plans;
  for (const auto& h : options.hosts) plans.push_back(host_plan(options, h, job.job_id, job.run_dir, workdir));
  server.set_plans(std::move(plans));
  std::string dlrun_here = self_path();
  std::string dlrun_there = options.remote_dlrun.empty() ? dlrun_here : options.remote_dlrun;
  auto path_it = env.find("PATH");
  std::string ssh_path = resolve_program(options.ssh.program, path_it == env.end() ? "" : path_it->second);
  auto server_ptr = &server;
  job.planner = [&, server_ptr](int round) {
    server_ptr->new_round(round);
    std::vector<Member> members;
    for (size_t node = 0; node < options.hosts.size(); ++node) {
      const Host& host = options.hosts[node];
      std::string rendezvous = fmt::format("{}:{}", contact[node], server_ptr->port());
      auto args = agent_args(options, host, static_cast<int>(node), round, rendezvous);
      Member m;
      m.spec.rank = static_cast<int>(node);
      m.spec.env = env;
      m.spec.env[env::k_restart_count] = std::to_string(round);
      m.name = fmt::format("host {} (node {})", host.name, node);
      m.log_path = fmt::format("{}/node-{}.log", job.log_dir, node);
      m.label = {static_cast<int>(node), 0, static_cast<int>(node), world, host.name};
      m.stdin_text = server_ptr->secret() + "\n";
      if (host.local) {
        m.program = {dlrun_here, {"dlrun"}, workdir};
        m.program.argv.insert(m.program.argv.end(), args.begin(), args.end());
      } else {
        std::string remote = "exec " + shell_quote(dlrun_there);
        for (const auto& a : args) remote += " " + shell_quote(a);
        m.program = {ssh_path, ssh_argv(options.ssh, host.name), workdir};
        m.program.argv.push_back(remote);
      }
      members.push_back(std::move(m));
    }
    return members;
  };
  job.host_lost = [&options, server_ptr, dlrun_there](size_t node, const ExitStatus& status) {
    std::string why;
    if (node >= options.hosts.size()) return why;
    const Host& host = options.hosts[node];
    if (server_ptr->joined(static_cast<int>(node))) {
      // ssh's 255 is also what a rank's own 255 comes out as: the agent's word tells them apart.
      // An agent that said another code and whose ssh then ended 255 died after it spoke (a
      // machine killed process by process: its ranks first, the agent a moment later).
      if (host.local || status.signaled || status.code != 255) return why;
      if (const auto said = server_ptr->reported_end(static_cast<int>(node), 1.0); said && *said == 255) return why;
      return fmt::format("lost host {} (node {}): its ssh session ended (exit 255) while its ranks ran, without a word "
                         "from its dlrun agent: the connection broke (the machine, its network) or the agent was "
                         "killed; its ranks there stop with the agent (its orphan guard)",
                         host.name, node);
    }
    const std::string there = host.local ? self_path() : dlrun_there;
    if (status.success()) {
      why = fmt::format("what ran there ended with code 0 before it joined the job: {} there is not dlrun's agent",
                        there);
    } else if (!status.signaled && (status.code == 127 || status.code == 126)) {
      why = fmt::format("{} {} before it joined the job: the shell there {} {}", host.local ? "dlrun" : "ssh",
                        status.describe(), status.code == 127 ? "found no" : "could not run", there);
    } else {
      return why;  // its own words (ssh's 255: the connection; the agent's error) say more
    }
    return fmt::format("host {} (node {}): {}, so no rank ran on it (give the path of dlrun on the hosts with "
                       "--remote-dlrun)",
                       host.name, node, why);
  };
  return run_agents(job, server);
}

int run_agents(Plan& job, RendezvousServer& server) {
  job.deliver_signal = [&server](int signal) { return server.broadcast_signal(signal); };
  job.pass_signal = [&server](int signal) { server.pass_signal(signal); };
  Supervisor supervisor(job);
  server.on_failure([&supervisor](const std::string& reason) {
    supervisor.request_stop(reason, exit_code::k_unavailable);
  });
  server.on_refused([](const std::string& reason) { log::warn("rendezvous: {}", reason); });
  int code = supervisor.run();
  server.stop();
  return code;
}

Plan launcher_job(const PlanOptions& plan, int world, const std::string& job_id, const Environment& env) {
  Plan job;
  job.options = plan;
  job.options.prefix_enabled = false;  // agents prefix their ranks' lines with host and rank
  job.options.shown_ranks.reset();
  job.options.watchdog_seconds = 0;    // the agents watch their ranks; the launcher watches hosts
  job.job_id = job_id;
  job.run_dir = prepare_run_dir(plan.run_dir, job_id, env);
  job.log_dir = prepare_log_dir(plan.log_dir, job.run_dir);
  job.world_size = world;
  job.base_env = env;
  job.host = "launcher";
  job.member_noun = "host";
  job.program.argv = plan.command;  // for messages and job.json; members run the agents
  return job;
}

}  // namespace dlrun::launcher
