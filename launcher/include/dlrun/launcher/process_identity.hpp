#pragma once
// A process named so that a recycled pid is not mistaken for it: the pid plus the
// process's start time (clock ticks since boot, /proc/PID/stat field 22). The job store
// keeps each job's supervisor this way, so a dead supervisor is always noticed.
// Thread-safe.

#include <sys/types.h>

#include <cstdint>

namespace dlrun::launcher {

struct ProcessIdentity {
  pid_t pid = 0;
  uint64_t start_time = 0;

  static ProcessIdentity self();
  // The identity of `pid` now, or pid 0 when there is no such process.
  static ProcessIdentity of(pid_t pid);
  // True while the very same process runs (not a zombie, not a newer one with its pid).
  bool alive() const;
};

}  // namespace dlrun::launcher
