// `dlrun _slurm-run`: the batch step of a dlrun job on Slurm. It serves the rendezvous
// and starts one agent per node with srun; see slurm.hpp.

#include <arpa/inet.h>
#include <netdb.h>
#include <unistd.h>

#include <filesystem>

#include <fmt/format.h>

#include "dlrun/error.hpp"
#include "dlrun/launcher/network.hpp"
#include "dlrun/launcher/process.hpp"
#include "dlrun/launcher/rendezvous.hpp"
#include "dlrun/launcher/slurm.hpp"
#include "dlrun/launcher/text.hpp"
#include "dlrun/protocol.hpp"

namespace fs = std::filesystem;

namespace dlrun::launcher {
namespace {

std::string get(const Environment& env, const char* key, const std::string& fallback = {}) {
  auto it = env.find(key);
  return it == env.end() || it->second.empty() ? fallback : it->second;
}

// An address of this node the others can reach: its host name's, if that is not a
// loopback address, else the first non-loopback interface's.
std::string node_address() {
  char name[256] = {};
  ::gethostname(name, sizeof name - 1);
  addrinfo hints{};
  hints.ai_family = AF_INET;
  addrinfo* result = nullptr;
  std::string address;
  if (::getaddrinfo(name, nullptr, &hints, &result) == 0) {
    for (addrinfo* a = result; a && address.empty(); a = a->ai_next) {
      char text[INET_ADDRSTRLEN] = "";
      ::inet_ntop(AF_INET, &reinterpret_cast<sockaddr_in*>(a->ai_addr)->sin_addr, text, sizeof text);
      if (std::string(text).rfind("127.", 0) != 0) address = text;
    }
    ::freeaddrinfo(result);
  }
  if (!address.empty()) return address;
  for (const auto& candidate : own_names()) {
    if (candidate.find('.') != std::string::npos && candidate.rfind("127.", 0) != 0 &&
        std::isdigit(static_cast<unsigned char>(candidate[0]))) {
      return candidate;
    }
  }
  return "127.0.0.1";
}

}  // namespace

int run_slurm_step(const SlurmStepOptions& options, const Environment& env) {
  int nodes = parse_int(get(env, "SLURM_JOB_NUM_NODES", get(env, "SLURM_NNODES", "1"))).value_or(1);
  std::vector<int> slots(static_cast<size_t>(nodes), options.ranks_per_node);
  std::vector<std::string> names;
  for (int n = 0; n < nodes; ++n) names.push_back(fmt::format("node {}", n));
  int world = nodes * options.ranks_per_node;

  RendezvousServer server(random_secret(), slots, names, options.cluster.join_timeout);
  std::string address = node_address();
  server.start(address, 0);  // only where the agents connect
  std::string contact = fmt::format("{}:{}", address, server.port());

  Plan job = launcher_job(options.cluster.plan, world, options.job_id, env);
  job.member_noun = "step";
  auto path_it = env.find("PATH");
  std::string srun = resolve_program("srun", path_it == env.end() ? "" : path_it->second);
  std::error_code ec;
  std::string dlrun = fs::read_symlink("/proc/self/exe", ec).string();
  std::string workdir = fs::current_path().string();
  if (!options.workdir.empty()) {
    std::error_code missing;
    if (!fs::is_directory(options.workdir, missing)) {
      char node[256] = {};
      ::gethostname(node, sizeof node - 1);
      // Slurm started the job in another directory (its --chdir falls back to /tmp): running the
      // program there would be another job.
      throw SpawnError(fmt::format("the job's workdir {} is not a directory on node {}", options.workdir, node));
    }
    workdir = options.workdir;
  }
  Host any{"slurm", options.ranks_per_node, false};
  server.set_plans(std::vector<std::string>(static_cast<size_t>(nodes),
                                            host_plan(options.cluster, any, job.job_id, job.run_dir, workdir)));
  job.planner = [&, world](int round) {
    server.new_round(round);
    Member m;
    m.spec.rank = 0;
    m.spec.env = env;
    m.spec.env[env::k_restart_count] = std::to_string(round);
    m.name = fmt::format("srun of {} agent{}", nodes, nodes == 1 ? "" : "s");
    m.log_path = job.log_dir + "/srun.log";
    m.label = {0, 0, 0, world, "slurm"};
    m.stdin_text = server.secret() + "\n";
    // One agent per node; stdin (the secret, then the launcher's liveness) to all of them.
    m.program = {srun, {"srun", "--nodes", std::to_string(nodes), "--ntasks-per-node=1",
                        fmt::format("--cpus-per-task={}", options.ranks_per_node), "--input=all",
                        "--kill-on-bad-exit=1", dlrun},
                 workdir};
    auto args = agent_args(options.cluster, any, -1, round, contact);
    m.program.argv.insert(m.program.argv.end(), args.begin(), args.end());
    return std::vector<Member>{m};
  };
  return run_agents(job, server);
}

}  // namespace dlrun::launcher
