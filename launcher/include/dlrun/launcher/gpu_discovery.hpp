#pragma once
// Counts this machine's NVIDIA GPUs through NVML, loaded at run time (libnvidia-ml.so.1)
// so that dlrun builds and runs on machines without a driver. For tests, DLRUN_FAKE_GPUS=N
// pretends N GPUs exist (documented in docs/channels.md). Not thread-safe: call once.

#include <string>

namespace dlrun::launcher {

struct GpuInventory {
  int count = 0;
  std::string source;  // "NVML", "DLRUN_FAKE_GPUS"
  std::string error;   // why none were found, when count == 0
};

GpuInventory discover_gpus();

}  // namespace dlrun::launcher
