#pragma once
// The exceptions dlrun's runtime throws, all `dlrun::Error` subclasses (see
// dlrun/error.hpp and docs/errors.md). Each message says what failed, on what
// input and what to do. A training program that lets them escape main() exits with
// std::terminate; catch `dlrun::Error` and return e.exit_code() to keep dlrun's codes.

#include <string>

#include "dlrun/error.hpp"

namespace dlrun {

// The environment describes no usable world: half of RANK/WORLD_SIZE/MASTER_ADDR/
// MASTER_PORT is set, or a value is not a number in range. Exit code 2.
class EnvironmentError : public ConfigError {
 public:
  explicit EnvironmentError(const std::string& message) : ConfigError(message) {}
};

// The ranks could not meet: the store at MASTER_ADDR:MASTER_PORT was not reachable, or not
// every rank joined, within the rendezvous timeout.
class RendezvousTimeout : public Error {
 public:
  explicit RendezvousTimeout(const std::string& message) : Error(message) {}
};

// A collective (broadcast, allreduce, barrier) failed: usually another rank died.
class CommunicationError : public Error {
 public:
  explicit CommunicationError(const std::string& message) : Error(message) {}
};

// A checkpoint could not be written, or none of the checkpoints in the directory could be read.
class CheckpointError : public Error {
 public:
  explicit CheckpointError(const std::string& message) : Error(message) {}
};

}  // namespace dlrun
