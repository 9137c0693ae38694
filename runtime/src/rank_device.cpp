#include "rank_device.hpp"

#include <c10/core/impl/VirtualGuardImpl.h>
#include <fmt/format.h>
#include <torch/cuda.h>

#include "dlrun/runtime_errors.hpp"

namespace dlrun::runtime {

DeviceKind requested_device(DeviceKind from_options, const std::string& from_env) {
  if (from_options != DeviceKind::automatic) return from_options;
  if (from_env == "cpu") return DeviceKind::cpu;
  if (from_env == "cuda") return DeviceKind::cuda;
  return DeviceKind::automatic;
}

int choose_cuda_index(DeviceKind kind, int local_rank, int cuda_devices) {
  if (kind == DeviceKind::cpu) return -1;
  if (cuda_devices <= 0) {
    if (kind == DeviceKind::automatic) return -1;
    throw ConfigError(
        "a CUDA device was asked for (dlrun local --gpus, DLRUN_DEVICE=cuda or "
        "InitOptions::device), but this rank sees none: the LibTorch it links has no CUDA, or "
        "CUDA_VISIBLE_DEVICES hides every GPU; use --nproc N for CPU ranks");
  }
  return cuda_devices == 1 ? 0 : local_rank % cuda_devices;
}

int select_rank_device(DeviceKind kind, int local_rank) {
  const int count = kind == DeviceKind::cpu ? 0 : static_cast<int>(torch::cuda::device_count());
  const int index = choose_cuda_index(kind, local_rank, count);
  if (index >= 0) {
    c10::impl::VirtualGuardImpl cuda(c10::DeviceType::CUDA);
    cuda.setDevice(c10::Device(c10::DeviceType::CUDA, static_cast<c10::DeviceIndex>(index)));
  }
  return index;
}

}  // namespace dlrun::runtime
