#pragma once
// Which GPUs a local job uses: parses `--gpus N` / `--gpus 0,2,3` and CUDA_VISIBLE_DEVICES,
// and picks the devices for the ranks. Pure functions, no I/O; discovery is in
// gpu_discovery.hpp.

#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace dlrun::launcher {

// `--gpus 4` asks for a count; `--gpus 0,2,3` names devices as nvidia-smi numbers them
// (or by UUID, as CUDA_VISIBLE_DEVICES allows); `--gpus device=3` names one (or a list).
struct GpuRequest {
  std::optional<int> count;
  std::vector<std::string> ids;
};

// Throws ConfigError naming the bad spec.
GpuRequest parse_gpu_request(std::string_view spec);
// "0,2,3": GPU ids, in order; `option` names the list in messages ("--gpu-ids").
std::vector<std::string> parse_gpu_ids(std::string_view spec, std::string_view option);
// As a user would write it: "4" or "0,2,3".
std::string format_gpu_request(const GpuRequest& request);

// Splits a CUDA_VISIBLE_DEVICES value; empty entries are dropped. An empty value means
// "no device visible" and gives an empty list.
std::vector<std::string> parse_visible_devices(std::string_view value);

// The device ids this machine offers the job: CUDA_VISIBLE_DEVICES when it is set,
// else "0" … "count-1".
std::vector<std::string> available_gpus(int discovered_count,
                                        const std::optional<std::string>& visible_devices);

// The devices for the ranks, one per rank, in rank order. Throws ConfigError when the
// request cannot be met, naming what is available; `label` names the request in it ("--gpus 4").
// `visible_devices`: CUDA_VISIBLE_DEVICES when it decided `available` (the message says so).
std::vector<std::string> select_gpus(const GpuRequest& request, const std::vector<std::string>& available,
                                     const std::string& label,
                                     const std::optional<std::string>& visible_devices = std::nullopt);

}  // namespace dlrun::launcher
