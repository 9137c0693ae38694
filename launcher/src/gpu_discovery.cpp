#include "dlrun/launcher/gpu_discovery.hpp"

#include <dlfcn.h>

#include <cstdlib>

#include <fmt/format.h>

#include "dlrun/error.hpp"
#include "dlrun/launcher/text.hpp"
#include "dlrun/protocol.hpp"

namespace dlrun::launcher {
namespace {

GpuInventory discover_with_nvml() {
  GpuInventory inventory;
  inventory.source = "NVML";
  void* lib = ::dlopen("libnvidia-ml.so.1", RTLD_NOW | RTLD_LOCAL);
  if (lib == nullptr) {
    inventory.error = "no NVIDIA driver found (libnvidia-ml.so.1 cannot be loaded)";
    return inventory;
  }
  using InitFn = int (*)();
  using CountFn = int (*)(unsigned int*);
  auto init = reinterpret_cast<InitFn>(::dlsym(lib, "nvmlInit_v2"));
  auto count = reinterpret_cast<CountFn>(::dlsym(lib, "nvmlDeviceGetCount_v2"));
  auto shutdown = reinterpret_cast<InitFn>(::dlsym(lib, "nvmlShutdown"));
  if (init == nullptr || count == nullptr || shutdown == nullptr) {
    inventory.error = "libnvidia-ml.so.1 lacks nvmlInit_v2/nvmlDeviceGetCount_v2";
  } else if (int rc = init(); rc != 0) {
    inventory.error = fmt::format("NVML failed to initialise (nvmlInit_v2 returned {})", rc);
  } else {
    unsigned int n = 0;
    if (int rc2 = count(&n); rc2 != 0) {
      inventory.error = fmt::format("NVML cannot count GPUs (error {})", rc2);
    } else {
      inventory.count = static_cast<int>(n);
      if (n == 0) inventory.error = "NVML reports no GPU";
    }
    shutdown();
  }
  ::dlclose(lib);
  return inventory;
}

std::vector<std::string> uuids_with_nvml() {
  std::vector<std::string> uuids;
  void* lib = ::dlopen("libnvidia-ml.so.1", RTLD_NOW | RTLD_LOCAL);
  if (lib == nullptr) return uuids;
  using InitFn = int (*)();
  using CountFn = int (*)(unsigned int*);
  using HandleFn = int (*)(unsigned int, void**);
  using UuidFn = int (*)(void*, char*, unsigned int);
  auto init = reinterpret_cast<InitFn>(::dlsym(lib, "nvmlInit_v2"));
  auto count = reinterpret_cast<CountFn>(::dlsym(lib, "nvmlDeviceGetCount_v2"));
  auto handle_of = reinterpret_cast<HandleFn>(::dlsym(lib, "nvmlDeviceGetHandleByIndex_v2"));
  auto uuid_of = reinterpret_cast<UuidFn>(::dlsym(lib, "nvmlDeviceGetUUID"));
  auto shutdown = reinterpret_cast<InitFn>(::dlsym(lib, "nvmlShutdown"));
  if (init && count && handle_of && uuid_of && shutdown && init() == 0) {
    unsigned int n = 0;
    if (count(&n) == 0) {
      for (unsigned int i = 0; i < n; ++i) {
        void* device = nullptr;
        char text[96] = {};  // NVML_DEVICE_UUID_V2_BUFFER_SIZE
        const bool known = handle_of(i, &device) == 0 && uuid_of(device, text, sizeof text - 1) == 0;
        uuids.push_back(known ? std::string(text) : std::string());
      }
    }
    shutdown();
  }
  ::dlclose(lib);
  return uuids;
}

}  // namespace

std::vector<std::string> gpu_uuids() {
  // Looked up once per process (NVML's start is slow; the GPUs do not change meanwhile).
  static const std::vector<std::string> uuids = [] {
    if (!std::getenv(env::k_fake_gpus)) return uuids_with_nvml();
    std::vector<std::string> fake;
    const char* text = std::getenv("DLRUN_FAKE_GPU_UUIDS");
    if (text == nullptr) return fake;
    const std::string list = text;
    for (size_t start = 0;;) {
      const size_t comma = list.find(',', start);
      fake.push_back(list.substr(start, comma == std::string::npos ? std::string::npos : comma - start));
      if (comma == std::string::npos) break;
      start = comma + 1;
    }
    return fake;
  }();
  return uuids;
}

GpuInventory discover_gpus() {
  if (const char* fake = std::getenv(env::k_fake_gpus)) {
    auto n = parse_int(fake);
    if (!n || *n < 0) {
      throw ConfigError(fmt::format("{}={}: expected a number of GPUs", env::k_fake_gpus, fake));
    }
    GpuInventory inventory{*n, env::k_fake_gpus, {}};
    if (*n == 0) inventory.error = fmt::format("{}=0", env::k_fake_gpus);
    return inventory;
  }
  return discover_with_nvml();
}

}  // namespace dlrun::launcher
