#include "dlrun/error.hpp"

#include <cstring>

namespace dlrun {

SystemError::SystemError(const std::string& what, int err)
    : Error(what + ": " + std::strerror(err)) {}

}  // namespace dlrun
