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

// What a failed collective's message says of the other ranks: a timeout (no peer answered
// within the collective timeout) is a rank that runs other collectives than this one, or hangs,
// as often as one that exited; a closed connection is one that exited.
inline std::string peers_hint(const std::string& message) {
  const bool timed_out = message.find("Timed out") != std::string::npos ||
                         message.find("timed out") != std::string::npos ||
                         message.find("Timeout") != std::string::npos;
  if (!timed_out) return "another rank probably exited; see its log";
  return "no other rank took part within the collective timeout: one exited or hangs, or runs other collectives "
         "than this one (a backward() or a checkpoint save that some ranks skip, a different number of steps or "
         "batches on some rank); see the other ranks' logs";
}

}  // namespace dlrun::runtime
