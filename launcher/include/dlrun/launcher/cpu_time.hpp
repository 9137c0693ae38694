#pragma once
// The CPU time a process has used (user + system, its threads included, and that of children
// it waited for), from /proc/PID/stat: to tell a rank that works from one that waits.
// Thread-safe.

#include <sys/types.h>

#include <optional>
#include <vector>

namespace dlrun::launcher {

// Seconds of CPU; nullopt when there is no such process (or /proc cannot say).
std::optional<double> cpu_seconds(pid_t pid);
// The same summed over the processes of a process group (a rank and what it started: a
// `sh train.sh`, `conda run` or DataLoader workers); nullopt when none is left.
std::optional<double> group_cpu_seconds(pid_t group);
// The processes of process group `group` whose parent is `parent` (what an ended rank left:
// orphans its supervisor, their subreaper, took over).
std::vector<pid_t> children_in_group(pid_t group, pid_t parent);

}  // namespace dlrun::launcher
