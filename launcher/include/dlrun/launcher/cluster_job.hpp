#pragma once
// `dlrun run --hosts …` and `dlrun agent`: one job across machines. The launching dlrun
// checks every host over ssh, serves the rendezvous (rendezvous.hpp) and supervises one
// member per host: `ssh HOST dlrun agent …` (or the agent directly for this machine).
// Each agent joins the rendezvous with the job's secret, learns its node rank and first
// global rank, and runs its host's ranks with the same Supervisor as `dlrun local`.
// A failing rank ends its agent, which ends its ssh session, which stops the job on every
// host; written up in docs/run.md.

#include <functional>
#include <string>
#include <vector>

#include "dlrun/launcher/host_list.hpp"
#include "dlrun/launcher/plan.hpp"
#include "dlrun/launcher/ssh.hpp"

namespace dlrun::launcher {

struct ClusterOptions {
  // command, prefix, grace, max_restarts, watchdog, run_dir, log_dir, quiet, colour (the ranks: hosts)
  PlanOptions plan;
  Environment job_env;          // every rank gets these on every host (agent_plan.hpp)
  std::string job_id;           // DLRUN_JOB_ID; default: a new one (a submitted job: its number)
  std::vector<Host> hosts;
  bool gpu_slots = false;       // slots are GPUs: one rank per GPU
  std::vector<std::string> gpu_ids;  // with gpu_slots: these GPUs on every host (its first `slots` of them)
  SshSettings ssh;
  std::string remote_dlrun;     // dlrun's path on the other hosts; default: this one's
  std::string iface;            // reach the rendezvous through this interface
  std::string master_addr;      // MASTER_ADDR for every rank; default: rank 0's host
  double join_timeout = 60;     // seconds for every agent to join
  // Told the launcher's plan before anything starts (dlrun run records it as a job:
  // foreground_job.hpp). Empty: nothing.
  std::function<void(Plan& plan)> attach;
};

// Throws ConfigError for bad options and unreachable hosts (all named at once).
int run_cluster_job(const ClusterOptions& options, const Environment& env);

// Where an agent meets the launcher, and which node it is: all of its command line. What it
// runs (its PlanOptions, the job id, the working directory) comes in the rendezvous's
// assignment (agent_plan.hpp).
struct AgentOptions {
  std::string rendezvous_host;
  int rendezvous_port = 0;
  int node = 0;
  int round = 0;
  std::string host_label;
  std::string master_addr;  // override for MASTER_ADDR (node 0 reports it)
};

// The body of `dlrun agent`: reads the secret from stdin, joins, runs this host's ranks.
int run_agent(const AgentOptions& options, const Environment& env);

// Shared by `dlrun run` and the Slurm step ------------------------------------------
class RendezvousServer;

// The launcher's own Plan: members are agents (or an srun starting them), whose
// lines arrive already prefixed.
Plan launcher_job(const PlanOptions& plan, int world, const std::string& job_id, const Environment& env);
// An agent's command line after the program; node < 0: it takes its node from Slurm.
std::vector<std::string> agent_args(const ClusterOptions& options, const Host& host, int node, int round,
                                    const std::string& rendezvous);
// The plan a host's agent receives with its assignment (format_agent_plan()).
std::string host_plan(const ClusterOptions& options, const Host& host, const std::string& job_id,
                      const std::string& run_dir, const std::string& workdir);
// Runs `job` (whose planner starts the agents) with signals passed on over `server`,
// failing the attempt when the rendezvous does.
int run_agents(Plan& job, RendezvousServer& server);

}  // namespace dlrun::launcher
