#pragma once
// The local scheduler's decision, without I/O: may the job at the head of the queue start
// now, and on which GPUs / with how many ranks? FIFO: only the oldest pending job may
// start, so a big job is never starved by small ones behind it. GPUs are handed out by
// index and never shared; CPU ranks take one slot each. Pure, thread-safe.

#include <map>
#include <optional>
#include <set>
#include <string>
#include <vector>

namespace dlrun::launcher {

struct Capacity {
  int gpus = 0;       // GPU indices 0 … gpus-1
  int cpu_slots = 1;
  // GPUs that jobs of other dlrun stores hold now (gpu_claims.hpp), each with who holds it:
  // not free for this store's jobs, though they count in `gpus`.
  std::map<std::string, std::string> gpus_elsewhere{};
  // `gpus` less those of 0 … gpus-1 held elsewhere and not by this store's jobs too (`used_here`:
  // a GPU shared by naming it counts once, as this store's).
  int gpus_free_of_others(const std::set<std::string>& used_here = {}) const;
};

struct Usage {
  std::set<std::string> gpus_in_use;
  int cpu_slots_in_use = 0;
};

struct ResourceRequest {
  bool uses_gpus = false;
  int min_ranks = 1;
  int max_ranks = 1;
  std::vector<std::string> gpu_ids;  // specific GPUs; empty: any
  bool remote = false;  // ranks on other hosts (scheduler kind "ssh"): takes nothing here
  bool goodput = false; // started and sized by the goodput scheduler, not by fit() (scheduler_loop.hpp)
};

struct Allocation {
  int ranks = 0;
  std::vector<std::string> gpu_ids;  // one per rank when uses_gpus
};

// The allocation for `request` given what is in use, or nullopt when it must wait.
// Elastic requests get as many ranks as fit, up to max, at least min.
std::optional<Allocation> fit(const ResourceRequest& request, const Capacity& capacity, const Usage& usage);

// Why `request` can never run on this machine, or empty when it can.
std::string never_fits(const ResourceRequest& request, const Capacity& capacity);

}  // namespace dlrun::launcher
