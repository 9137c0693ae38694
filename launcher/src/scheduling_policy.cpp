#include "dlrun/launcher/scheduling_policy.hpp"

#include <algorithm>

#include <fmt/format.h>

namespace dlrun::launcher {

int Capacity::gpus_free_of_others(const std::set<std::string>& used_here) const {
  int free = gpus;
  for (int i = 0; i < gpus; ++i) {
    const std::string id = std::to_string(i);
    free -= gpus_elsewhere.count(id) && !used_here.count(id) ? 1 : 0;
  }
  return free;
}

std::optional<Allocation> fit(const ResourceRequest& request, const Capacity& capacity, const Usage& usage) {
  Allocation allocation;
  if (request.remote) {
    allocation.ranks = request.max_ranks;
    return allocation;
  }
  if (!request.uses_gpus) {
    int free_slots = capacity.cpu_slots - usage.cpu_slots_in_use;
    if (free_slots < request.min_ranks) return std::nullopt;
    allocation.ranks = std::min(request.max_ranks, free_slots);
    return allocation;
  }
  if (!request.gpu_ids.empty()) {
    for (const auto& id : request.gpu_ids) {
      if (usage.gpus_in_use.count(id) || capacity.gpus_elsewhere.count(id)) return std::nullopt;
    }
    allocation.gpu_ids = request.gpu_ids;
    allocation.ranks = static_cast<int>(request.gpu_ids.size());
    return allocation;
  }
  for (int i = 0; i < capacity.gpus && static_cast<int>(allocation.gpu_ids.size()) < request.max_ranks; ++i) {
    std::string id = std::to_string(i);
    if (!usage.gpus_in_use.count(id) && !capacity.gpus_elsewhere.count(id)) allocation.gpu_ids.push_back(id);
  }
  if (static_cast<int>(allocation.gpu_ids.size()) < request.min_ranks) return std::nullopt;
  allocation.ranks = static_cast<int>(allocation.gpu_ids.size());
  return allocation;
}

std::string never_fits(const ResourceRequest& request, const Capacity& capacity) {
  if (request.remote) return {};
  if (!request.uses_gpus) {
    if (request.min_ranks > capacity.cpu_slots) {
      return fmt::format("needs {} CPU slots, this machine has {} (cpu_slots in config.toml's [queue], or DLRUN_CPU_SLOTS, allows more)",
                         request.min_ranks, capacity.cpu_slots);
    }
    return {};
  }
  for (const auto& id : request.gpu_ids) {
    char* end = nullptr;
    long n = std::strtol(id.c_str(), &end, 10);
    if (*end != '\0' || n < 0 || n >= capacity.gpus) {
      if (capacity.gpus == 0) return fmt::format("asks for GPU {}, this machine has no GPU", id);
      return fmt::format("asks for GPU {}, this machine has {} GPU{} ({})", id, capacity.gpus,
                         capacity.gpus == 1 ? "" : "s", capacity.gpus == 1 ? "0" : fmt::format("0 to {}", capacity.gpus - 1));
    }
  }
  if (request.gpu_ids.empty() && request.min_ranks > capacity.gpus) {
    return fmt::format("needs {} GPU{}, this machine has {}", request.min_ranks, request.min_ranks == 1 ? "" : "s",
                       capacity.gpus);
  }
  return {};
}

}  // namespace dlrun::launcher
