#include "dlrun/launcher/error.hpp"

#include <cstring>

#include <fmt/format.h>

namespace dlrun {

SystemError::SystemError(const std::string& what, int err)
    : Error(fmt::format("{}: {}", what, std::strerror(err))) {}

}  // namespace dlrun
