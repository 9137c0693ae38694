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

}  // namespace

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
