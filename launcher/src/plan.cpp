#include "dlrun/launcher/plan.hpp"

#include <unistd.h>

#include <algorithm>

#include <fmt/format.h>

#include "dlrun/error.hpp"
#include "dlrun/launcher/command_resolution.hpp"
#include "dlrun/launcher/duration_limit.hpp"
#include "dlrun/launcher/free_port.hpp"
#include "dlrun/launcher/gpu_discovery.hpp"
#include "dlrun/launcher/gpu_selection.hpp"
#include "dlrun/launcher/process.hpp"
#include "dlrun/launcher/run_dir.hpp"
#include "dlrun/launcher/rank_env.hpp"
#include "dlrun/launcher/supervisor.hpp"
#include "dlrun/launcher/text.hpp"
#include "dlrun/protocol.hpp"

namespace dlrun::launcher {
namespace {

std::vector<std::string> choose_gpus(GpuRequest request, const Environment& env, std::optional<int> min,
                                     SettingsSource source, const std::string& label,
                                     const std::vector<std::string>& busy) {
  // An elastic request says its whole range: "--gpus 5:8", not the 8 it asks for at most.
  const std::string asked = min && request.count ? fmt::format("{}:{}", *min, *request.count)
                                                 : format_gpu_request(request);
  const std::string spec = label.empty() ? setting_label(source, "gpus", asked) : label;
  const char* cpu_ranks = source == SettingsSource::job_file ? "nproc = N in [resources]" : "--nproc N";
  GpuInventory inventory = discover_gpus();
  std::optional<std::string> visible;
  if (auto it = env.find(env::k_cuda_visible_devices); it != env.end()) visible = it->second;
  auto available = available_gpus(inventory.count, visible);
  if (inventory.count == 0) {
    throw ConfigError(fmt::format("{}: no GPU on this machine: {}; use {} to run CPU ranks", spec,
                                  inventory.error, cpu_ranks));
  }
  if (available.empty()) {
    throw ConfigError(fmt::format("{}: CUDA_VISIBLE_DEVICES is empty, so no GPU is visible; "
                                  "unset it or use {} to run CPU ranks", spec, cpu_ranks));
  }
  // A count takes only GPUs no other job holds (a list names them: the user's choice). A count
  // beyond the machine's is select_gpus's to refuse, saying how many there are.
  const int wanted = min ? *min : request.count.value_or(0);
  if (request.count && !busy.empty() && wanted <= static_cast<int>(available.size())) {
    std::vector<std::string> free;
    for (const auto& id : available) {
      if (std::find(busy.begin(), busy.end(), id) == busy.end()) free.push_back(id);
    }
    if (static_cast<int>(free.size()) < wanted) {
      std::vector<std::string> held;
      for (const auto& id : available) {
        if (std::find(free.begin(), free.end(), id) == free.end()) held.push_back(id);
      }
      // The list that would run the count asked for, sharing as few GPUs as it can: the free
      // ones, then held ones, in the machine's order. dlrun run's agents name GPUs with
      // --gpu-ids, dlrun local with --gpus.
      std::vector<std::string> share;
      int held_to_add = wanted - static_cast<int>(free.size());  // free.size() < wanted
      for (const auto& id : available) {
        const bool is_free = std::find(free.begin(), free.end(), id) != free.end();
        if (is_free || held_to_add-- > 0) share.push_back(id);
      }
      const bool run_slots = label.rfind("--gpu ", 0) == 0;
      const std::string named = run_slots ? fmt::format("--gpu-ids {}", fmt::join(share, ","))
                                          : "--gpus " + format_gpu_request(GpuRequest{std::nullopt, share});
      throw ConfigError(fmt::format("{}: only {} of the {} GPUs here {} free: {} {} held by other jobs (dlrun "
                                    "status lists them); wait, or name GPUs to share them ({})",
                                    spec, free.size(), available.size(), free.size() == 1 ? "is" : "are",
                                    fmt::join(held, ","), held.size() == 1 ? "is" : "are", named));
    }
    available = free;
  }
  // Elastic: start with what is there, if that is at least MIN.
  if (min && request.count && static_cast<int>(available.size()) < *request.count &&
      static_cast<int>(available.size()) >= *min) {
    request.count = static_cast<int>(available.size());
  }
  return select_gpus(request, available, spec, visible);
}

std::string host_name() {
  char name[256] = {};
  if (::gethostname(name, sizeof name - 1) != 0) return "localhost";
  return name;
}

}  // namespace

bool use_color(ColorMode mode, int fd, const Environment& env) {
  if (mode != ColorMode::automatic) return mode == ColorMode::always;
  if (auto it = env.find(env::k_no_color); it != env.end() && !it->second.empty()) return false;
  if (auto it = env.find("TERM"); it != env.end() && it->second == "dumb") return false;
  return ::isatty(fd) == 1;
}

std::string setting_label(SettingsSource source, std::string_view key, std::string_view value) {
  if (source == SettingsSource::job_file) return fmt::format("the job's {} ({})", key, value);
  std::string flag(key);
  std::replace(flag.begin(), flag.end(), '_', '-');
  return fmt::format("--{} {}", flag, value);
}

Plan make_plan(const PlanOptions& options, const Environment& env,
                           const std::string& job_id) {
  Plan job;
  job.options = options;
  if (options.nproc && options.gpus) {
    throw ConfigError("--nproc and --gpus exclude each other: --gpus starts one rank per GPU");
  }
  if (!options.nproc && !options.gpus) {
    throw ConfigError("say how many ranks to start: --nproc N (CPU ranks) or --gpus N (one per GPU)");
  }
  if (options.nproc) {
    if (*options.nproc < 1) throw ConfigError(fmt::format("--nproc {}: must be at least 1", *options.nproc));
    job.world_size = *options.nproc;
  }
  if (auto problem = duration_problem(options.grace_seconds)) throw ConfigError("--grace: " + *problem);
  if (options.max_restarts < 0) {
    throw ConfigError(fmt::format("--max-restarts {}: must be 0 or more", options.max_restarts));
  }
  if (options.command.empty()) {
    throw ConfigError("no program given: put the program to run after the options, e.g. "
                      "dlrun local --nproc 2 ./train");
  }
  PrefixTemplate check_prefix(options.prefix);  // throws on a bad template
  (void)check_prefix;

  auto path_it = env.find("PATH");
  job.program = resolve_command(options.command, path_it == env.end() ? "" : path_it->second);

  if (options.gpus) {
    job.gpu_ids =
        choose_gpus(*options.gpus, env, options.min_ranks, options.source, options.gpus_label, options.gpus_in_use);
    job.world_size = static_cast<int>(job.gpu_ids.size());
  }
  if (options.max_ranks) {
    job.max_world_size = std::max(job.world_size, *options.max_ranks);
  } else {
    job.max_world_size = options.gpus && options.gpus->count ? std::max(job.world_size, *options.gpus->count)
                                                              : job.world_size;
  }
  job.min_world_size = options.min_ranks ? *options.min_ranks : job.world_size;
  if (job.min_world_size < 1 || job.min_world_size > job.max_world_size) {
    throw ConfigError(fmt::format("ranks {}:{}: MIN must be between 1 and MAX", job.min_world_size, job.max_world_size));
  }
  if (auto problem = duration_problem(options.watchdog_seconds)) throw ConfigError("--watchdog: " + *problem);
  if (options.shown_ranks) {
    for (int r : *options.shown_ranks) {
      if (r >= job.world_size) {
        throw ConfigError(fmt::format("--ranks: rank {} does not exist (ranks are 0 to {})", r,
                                      job.world_size - 1));
      }
    }
  }
  if (options.master_port && options.check_master_port) ensure_port_free(options.master_addr, *options.master_port);
  if (!options.master_port) ensure_local_address(options.master_addr);

  job.job_id = job_id.empty() ? make_job_id() : job_id;
  job.run_dir = prepare_run_dir(options.run_dir, job.job_id, env, &job.fresh_run_dir);
  job.log_dir = prepare_log_dir(options.log_dir, job.run_dir);
  job.host = host_name();
  job.base_env = env;
  job.cores = usable_cores();
  return job;
}

std::vector<Member> plan_local_members(const Plan& job, int restart_count) {
  const auto& options = job.options;
  NodePlanInput plan;
  plan.local_world_size = job.world_size;
  plan.world_size = job.global_world_size > 0 ? job.global_world_size : job.world_size;
  plan.node_rank = job.node_rank;
  plan.num_nodes = job.num_nodes;
  plan.first_rank = job.first_rank;
  plan.master_addr = options.master_addr;
  plan.master_port = options.master_port ? *options.master_port
                                         : pick_free_port(options.master_addr, port_claims_file());
  plan.run_dir = job.run_dir;
  plan.job_id = job.job_id;
  plan.restart_count = job.restarts_before + restart_count;
  plan.max_restarts = job.job_max_restarts.value_or(options.max_restarts);
  plan.cores = job.cores;
  plan.gpu_ids = job.gpu_ids;
  plan.gpu_binding = options.gpu_binding;
  plan.base = job.base_env;
  std::vector<Member> members;
  for (auto& spec : plan_node_ranks(plan)) {
    if (options.watchdog_seconds > 0) spec.env[env::k_progress_file] = progress_file(job.run_dir, spec.rank);
    if (!options.run_id.empty()) spec.env[env::k_torchelastic_run_id] = options.run_id;
    spec.env[env::k_min_world_size] = std::to_string(job.min_world_size > 0 ? job.min_world_size : job.world_size);
    spec.env[env::k_max_world_size] = std::to_string(job.max_world_size > 0 ? job.max_world_size : job.world_size);
    Member member;
    member.name = fmt::format("rank {}", spec.rank);
    member.log_path = rank_log_path(job.log_dir, spec.rank);
    member.label = {spec.rank, spec.local_rank, job.node_rank, plan.world_size, job.host};
    member.program = job.program;
    member.spec = std::move(spec);
    members.push_back(std::move(member));
  }
  return members;
}

std::string progress_file(const std::string& run_dir, int rank) {
  return fmt::format("{}/progress/rank-{}", run_dir, rank);
}

int run_plan(const Plan& job) {
  Supervisor supervisor(job);
  return supervisor.run();
}

}  // namespace dlrun::launcher
