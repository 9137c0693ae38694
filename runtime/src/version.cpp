#include <torch/version.h>

#include "dlrun/runtime.hpp"
#include "dlrun/launcher/version.hpp"

namespace dlrun::runtime {

const char* version() { return k_version; }

}  // namespace dlrun::runtime
