#include "dlrun/launcher/machine_share.hpp"

#include <algorithm>

namespace dlrun::launcher {

int capacity_beside_others(const MachineShareInput& in) {
  const int base = std::max(0, in.total - in.held_elsewhere);
  const int share = std::max(1, in.total / std::max(1, in.stores));
  const int fair_floor = std::max(in.least_here, std::min(share, base));
  int room = 0;
  for (const auto& job : in.waiting) {
    if (job.gpus < 1) continue;
    const int floor = job.starving ? in.least_here : fair_floor;
    if (base - room - job.gpus >= floor) room += job.gpus;
  }
  return base - room;
}

}  // namespace dlrun::launcher
