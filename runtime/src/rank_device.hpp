#pragma once
// Which device a rank trains on: the CPU, or one CUDA device. Internal; Context::device()
// reports the choice. choose_cuda_index() is the pure rule; select_rank_device() probes CUDA,
// applies the rule and makes the chosen GPU the thread's current device.

#include "dlrun/context.hpp"

namespace dlrun::runtime {

// The device kind asked for: InitOptions::device when not automatic, else DLRUN_DEVICE
// ("cpu"/"cuda", set by the launcher), else automatic.
DeviceKind requested_device(DeviceKind from_options, const std::string& from_env);

// -1 for the CPU, else the CUDA index. automatic takes CUDA when there is a device. With one
// visible device (dlrun gives each GPU rank its own, as cuda:0) every rank uses index 0;
// with several (CUDA_VISIBLE_DEVICES lists all), local rank i uses device i (modulo the count).
// Throws ConfigError for cuda with no device.
int choose_cuda_index(DeviceKind kind, int local_rank, int cuda_devices);

// choose_cuda_index() over torch::cuda::device_count(); sets the current CUDA device.
int select_rank_device(DeviceKind kind, int local_rank);

}  // namespace dlrun::runtime
