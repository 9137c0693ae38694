// `dlrun agent`: one host's part of a `dlrun run` job. See cluster_job.hpp.

#include <signal.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <iostream>
#include <string>
#include <atomic>
#include <thread>

#include <fmt/format.h>

#include "dlrun/launcher/cluster_job.hpp"

#include "dlrun/launcher/agent_plan.hpp"
#include "dlrun/error.hpp"
#include "dlrun/launcher/free_port.hpp"
#include "dlrun/launcher/gpu_claims.hpp"
#include "dlrun/log.hpp"
#include "dlrun/launcher/network.hpp"
#include "dlrun/launcher/process.hpp"
#include "dlrun/launcher/rendezvous.hpp"
#include "dlrun/launcher/run_dir.hpp"
#include "dlrun/launcher/supervisor.hpp"
#include "dlrun/protocol.hpp"

namespace dlrun::launcher {
namespace {

constexpr double k_connect_timeout = 30;

std::string read_secret() {
  std::string line;
  char c;
  while (::read(STDIN_FILENO, &c, 1) == 1) {
    if (c == '\n') return line;
    line += c;
    if (line.size() > 256) break;
  }
  throw ConfigError("dlrun agent reads the job's secret from its standard input; it is started by dlrun run, "
                    "not by hand");
}

std::atomic<bool> g_supervising{false};

// The launcher's end of ssh closing means the job is over: stop the ranks, or, before any
// started (the agent still connects or waits to join, the launcher gave up), end at once.
void stop_when_stdin_closes() {
  std::thread([] {
    char buffer[256];
    while (true) {
      ssize_t n = ::read(STDIN_FILENO, buffer, sizeof buffer);
      if (n == 0 || (n < 0 && errno != EINTR)) break;
    }
    if (!g_supervising) ::_exit(exit_code::k_unavailable);
    ::kill(::getpid(), SIGTERM);
  }).detach();
}

}  // namespace

int run_agent(const AgentOptions& options, const Environment& env) {
  log::set_prefix(fmt::format("dlrun[{}]", options.host_label));
  std::string secret = read_secret();
  // Stop signals wait until the Supervisor listens (it unblocks them).
  sigset_t stop = stop_signal_set();
  ::sigprocmask(SIG_BLOCK, &stop, nullptr);
  block_passed_signals();  // the launcher passes SIGUSR1/SIGUSR2 on to the ranks through this agent
  stop_when_stdin_closes();

  RendezvousClient client;
  client.connect(options.rendezvous_host, options.rendezvous_port, k_connect_timeout);
  JoinRequest request;
  request.secret = secret;
  request.round = options.round;
  request.node = options.node;
  request.address = options.master_addr.empty() ? client.local_address() : options.master_addr;
  request.port = options.node == 0 ? pick_free_port(client.local_address(), port_claims_file()) : 0;
  Assignment assignment = client.join(request, 3600);
  AgentPlan plan = parse_agent_plan(assignment.plan);
  if (!plan.workdir.empty() && ::chdir(plan.workdir.c_str()) != 0) {
    log::warn("cannot enter {}: {}; staying in {}", plan.workdir, std::strerror(errno),
              std::getenv("PWD") ? std::getenv("PWD") : ".");
  }

  Environment base = env;
  for (const auto& [key, value] : plan.env) base[key] = value;
  if (plan.options.quiet && log::level() < log::Level::warn) log::set_level(log::Level::warn);
  // Gloo and NCCL find their interface by the host name, which often resolves to a
  // loopback address: point them at the interface that reaches the launcher.
  std::string iface = interface_of_address(client.local_address());
  for (const char* key : {"GLOO_SOCKET_IFNAME", "NCCL_SOCKET_IFNAME"}) {
    if (!iface.empty() && !base.count(key)) base[key] = iface;
  }
  PlanOptions local = plan.options;
  local.master_addr = assignment.master_addr;
  local.master_port = assignment.master_port;
  local.check_master_port = false;
  local.max_restarts = 0;  // the launcher restarts all hosts together
  // --ranks names global ranks, most of them on other hosts: apply it after the local checks.
  auto shown = local.shown_ranks;
  local.shown_ranks.reset();
  // GPUs by count leave out those other stores' jobs hold on this host (gpu_claims.hpp).
  // An agent asks no store, so its own user's jobs' claims count too (an empty home).
  const std::string inside_job = inside_job_of(base);
  const auto claims_dir = gpu_claims_dir(base);
  const GpuKeys keys = claims_dir ? GpuKeys::here() : GpuKeys{};
  if (local.gpus && local.gpus->count && claims_dir) {
    for (const auto& [gpu, holders] : by_id(gpu_claims_elsewhere(*claims_dir, "", inside_job), keys)) {
      log::info("GPU {} is in use by {}: not chosen", gpu, describe(holders));
      local.gpus_in_use.push_back(gpu);
    }
  }
  Plan job = make_plan(local, base, plan.job_id);
  job.options.shown_ranks = shown;
  job.node_rank = assignment.node_rank;
  job.num_nodes = assignment.num_nodes;
  job.first_rank = assignment.first_rank;
  job.global_world_size = assignment.world_size;
  job.host = options.host_label;
  job.restarts_before = options.round;  // the launcher's attempt: DLRUN_RESTART_COUNT counts the job's
  job.job_max_restarts = plan.options.max_restarts;

  g_supervising = true;  // from here a closed stdin stops the ranks (SIGTERM, handled once they run)
  client.watch([](int signal) { ::kill(::getpid(), signal); });
  // This host's GPUs are claimed while its ranks run, so that other users' dlrun leaves them be.
  // The store that started the run (on another host, maybe) does not know them: its claims
  // are no store's (an empty home), so that every store leaves them be, this user's too.
  GpuClaims claims(claims_dir.value_or(""), "", plan.job_id, inside_job, keys);
  if (auto shared = claims.hold(job.gpu_ids); !shared.empty()) log::warn("{}", sharing_warning(shared));
  Supervisor supervisor(job);
  int code = supervisor.run();
  client.report_end(code);
  return code;
}

}  // namespace dlrun::launcher
