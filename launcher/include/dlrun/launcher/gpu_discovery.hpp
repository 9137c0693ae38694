#pragma once
// Counts this machine's NVIDIA GPUs through NVML, loaded at run time (libnvidia-ml.so.1)
// so that dlrun builds and runs on machines without a driver. For tests, DLRUN_FAKE_GPUS=N
// pretends N GPUs exist (documented in docs/channels.md). Not thread-safe: call once.

#include <string>
#include <vector>

namespace dlrun::launcher {

struct GpuInventory {
  int count = 0;
  std::string source;  // "NVML", "DLRUN_FAKE_GPUS"
  std::string error;   // why none were found, when count == 0
};

GpuInventory discover_gpus();

// Each GPU's UUID by its NVML index ("GPU-8a1b…"), as nvidia-smi -L shows them; empty where
// NVML cannot say (no driver, an error). With DLRUN_FAKE_GPUS: DLRUN_FAKE_GPU_UUIDS, a comma
// list (tests), else none. A UUID names a GPU the same way in every process, whatever a
// container or Slurm's device cgroup numbers it.
std::vector<std::string> gpu_uuids();

}  // namespace dlrun::launcher
