#pragma once
// Plans the ranks of one node: which rank numbers run here and the environment each one
// gets (the torch.distributed env:// variables, torchrun's other ones, and dlrun's own, see
// docs/channels.md).
// Pure: the caller passes in everything read from the machine, so tests need no processes.

#include <map>
#include <optional>
#include <string>
#include <vector>

namespace dlrun::launcher {

using Environment = std::map<std::string, std::string>;

// How the GPUs of a node are shown to its ranks.
enum class GpuBinding {
  rank,  // each rank sees only its own GPU (CUDA_VISIBLE_DEVICES=<its id>), as cuda:0
  all,   // every rank sees all of the job's GPUs, in order, and picks cuda:LOCAL_RANK
};

struct NodePlanInput {
  int local_world_size = 1;
  int node_rank = 0;
  int num_nodes = 1;
  int first_rank = 0;  // global rank of this node's local rank 0
  int world_size = 1;
  std::string master_addr = "127.0.0.1";
  int master_port = 0;
  std::string run_dir;
  std::string job_id;
  int restart_count = 0;
  int max_restarts = 0;              // the job's restart budget (TORCHELASTIC_MAX_RESTARTS)
  int cores = 1;                     // cores this node may use
  std::vector<std::string> gpu_ids;  // one per local rank, or empty for CPU ranks
  GpuBinding gpu_binding = GpuBinding::rank;
  Environment base;                  // the environment dlrun was started with
};

struct RankSpec {
  int rank = 0;
  int local_rank = 0;
  Environment env;
};

std::vector<RankSpec> plan_node_ranks(const NodePlanInput& input);

// The variables plan_node_ranks sets for every rank whatever the environment holds (what a
// job's [env] could not change), sorted; OMP_NUM_THREADS, kept when given, and
// CUDA_VISIBLE_DEVICES, set for GPU ranks only, are not among them.
std::vector<std::string> per_rank_variables();

// OMP_NUM_THREADS for each rank: the cores divided among the ranks, at least 1.
int threads_per_rank(int cores, int local_world_size);

}  // namespace dlrun::launcher
