#pragma once
// An exception's message for dlrun's own errors: a LibTorch error (c10::Error) without the C++
// backtrace its what() carries ("Exception raised from … frame #0 …").

#include <c10/util/Exception.h>

#include <exception>
#include <string>

namespace dlrun::runtime {

inline std::string message_of(const std::exception& e) {
  if (const auto* torch_error = dynamic_cast<const c10::Error*>(&e)) return torch_error->what_without_backtrace();
  return e.what();
}

}  // namespace dlrun::runtime
