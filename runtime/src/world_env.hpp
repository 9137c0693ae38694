#pragma once
// Reads the world a rank belongs to from the environment dlrun (or torchrun) sets. Pure: the
// lookup function is a parameter so tests need no real environment. Not part of the public
// API; Context is built from it.

#include <cstdint>
#include <functional>
#include <string>

namespace dlrun::runtime {

struct WorldEnv {
  int rank = 0;
  int world_size = 1;
  int local_rank = 0;
  int local_world_size = 1;  // ranks on this host (LOCAL_WORLD_SIZE; world_size when unset)
  std::string master_addr;  // empty for a world of one started without dlrun
  uint16_t master_port = 0;
  int restart_count = 0;
  std::string run_dir;  // empty when not run by dlrun
  std::string checkpoint_dir;  // DLRUN_CHECKPOINT_DIR: set for submitted jobs (job.toml checkpoint_dir)
  std::string progress_file;  // DLRUN_PROGRESS_FILE: set when dlrun runs a watchdog
  std::string device;         // DLRUN_DEVICE: "cpu", "cuda", or empty (not said)
  bool distributed() const { return !master_addr.empty(); }
};

using EnvLookup = std::function<const char*(const char*)>;

// Throws EnvironmentError naming the missing or malformed variables.
WorldEnv read_world_env(const EnvLookup& lookup);

}  // namespace dlrun::runtime
