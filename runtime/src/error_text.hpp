#pragma once
// An exception's message for dlrun's own errors: a LibTorch error (c10::Error) without the C++
// backtrace its what() carries ("Exception raised from … frame #0 …"), and a Python one raised
// in a callback (pybind11's error_already_set) without the traceback it appends ("\n\nAt:\n …").

#include <c10/util/Exception.h>

#include <exception>
#include <string>

namespace dlrun::runtime {

inline std::string message_of(const std::exception& e) {
  if (const auto* torch_error = dynamic_cast<const c10::Error*>(&e)) return torch_error->what_without_backtrace();
  std::string message = e.what();
  if (const size_t at = message.find("\n\nAt:\n"); at != std::string::npos) message.resize(at);
  return message;
}

}  // namespace dlrun::runtime
