#include "dlrun/launcher/rank_env.hpp"

#include <algorithm>

#include <fmt/format.h>
#include <fmt/ranges.h>

#include "dlrun/launcher/error_file.hpp"
#include "dlrun/protocol.hpp"

namespace dlrun::launcher {

int threads_per_rank(int cores, int local_world_size) {
  if (local_world_size <= 0) return std::max(1, cores);
  return std::max(1, cores / local_world_size);
}

std::vector<RankSpec> plan_node_ranks(const NodePlanInput& in) {
  std::vector<RankSpec> ranks;
  ranks.reserve(static_cast<size_t>(in.local_world_size));
  const std::string all_gpus = fmt::format("{}", fmt::join(in.gpu_ids, ","));
  for (int local = 0; local < in.local_world_size; ++local) {
    RankSpec spec;
    spec.local_rank = local;
    spec.rank = in.first_rank + local;
    Environment& env = spec.env;
    env = in.base;
    env[env::k_rank] = std::to_string(spec.rank);
    env[env::k_local_rank] = std::to_string(local);
    env[env::k_world_size] = std::to_string(in.world_size);
    env[env::k_local_world_size] = std::to_string(in.local_world_size);
    env[env::k_node_rank] = std::to_string(in.node_rank);
    env[env::k_group_rank] = std::to_string(in.node_rank);
    env[env::k_master_addr] = in.master_addr;
    env[env::k_master_port] = std::to_string(in.master_port);
    env[env::k_run_dir] = in.run_dir;
    if (!in.run_dir.empty()) env[env::k_result_file] = in.run_dir + "/result.json";
    env[env::k_restart_count] = std::to_string(in.restart_count);
    env[env::k_job_id] = in.job_id;
    // torchrun's names for the same facts (one role: ROLE_* are the global ones).
    env[env::k_group_world_size] = std::to_string(in.num_nodes);
    env[env::k_role_name] = "default";
    env[env::k_role_rank] = env[env::k_rank];
    env[env::k_role_world_size] = env[env::k_world_size];
    env[env::k_torchelastic_run_id] = in.job_id;
    env[env::k_torchelastic_restart_count] = env[env::k_restart_count];
    env[env::k_torchelastic_max_restarts] = std::to_string(in.max_restarts);
    env[env::k_torchelastic_error_file] = error_file_path(in.run_dir, spec.rank);
    // dlrun's ranks meet at their own store: one inherited from a torchrun worker around dlrun
    // would send dlrun.init() to torchrun's agent's (and every rank waited for a store no one hosts).
    env.erase(env::k_torchelastic_use_agent_store);
    if (in.base.count(env::k_omp_num_threads) == 0) {
      env[env::k_omp_num_threads] = std::to_string(threads_per_rank(in.cores, in.local_world_size));
    }
    // Python's print() otherwise waits in a buffer until the rank exits (a pipe is not a
    // terminal), and is lost when the rank is killed: unbuffered, as torchrun's `python -u`.
    if (in.base.count(env::k_python_unbuffered) == 0) env[env::k_python_unbuffered] = "1";
    env[env::k_device] = in.gpu_ids.empty() ? "cpu" : "cuda";
    if (!in.gpu_ids.empty()) {
      env[env::k_cuda_visible_devices] =
          in.gpu_binding == GpuBinding::rank ? in.gpu_ids.at(static_cast<size_t>(local)) : all_gpus;
    }
    ranks.push_back(std::move(spec));
  }
  return ranks;
}

std::vector<std::string> per_rank_variables() {
  NodePlanInput in;  // CPU ranks, with OMP_NUM_THREADS and PYTHONUNBUFFERED given: only what is always set is new
  in.base[env::k_omp_num_threads] = "1";
  in.base[env::k_python_unbuffered] = "1";
  const std::vector<RankSpec> ranks = plan_node_ranks(in);
  std::vector<std::string> names;
  for (const auto& [name, value] : ranks.front().env) {
    if (in.base.count(name) == 0) names.push_back(name);
  }
  return names;
}

}  // namespace dlrun::launcher
