#pragma once
// One change of a job's allocation on this machine, as the job store records it (its start,
// a resize, its end) and the allocation trace draws it (allocation_trace.hpp).

#include <cstdint>
#include <string>
#include <vector>

namespace dlrun::launcher {

struct AllocationEvent {
  int64_t job = 0;                   // job id
  std::string name;                  // job name (for the legend)
  double at = 0;                     // Unix seconds
  int ranks = 0;                     // ranks after this event; 0 = the job released everything (ended)
  std::vector<std::string> gpu_ids;  // GPU indices held after the event; empty for CPU jobs
  std::string cause;                 // "start", "resize", "scheduler", "end"
};

}  // namespace dlrun::launcher
