#include "dlrun/version.hpp"

#include <torch/version.h>

#include "dlrun/runtime.hpp"

namespace dlrun::runtime {

const char* version() {
  return k_version;
}

}  // namespace dlrun::runtime
