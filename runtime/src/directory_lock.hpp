#pragma once
// Two runs that save into one checkpoint directory resume from each other's checkpoints (two
// submitted jobs given one checkpoint_dir). Rank 0 holds a shared-use marker on DIR/.lock
// (flock(2)) from restore() to the end of its process, and says so when another process holds
// it: a warning, not a refusal, since a holder may be harmless (a notebook that restored the
// run's weights to look at them) or still ending (a host of the job's previous attempt, an NFS
// lock of a crashed node). The kernel drops the lock with the process. Thread-safe.

#include <filesystem>

namespace dlrun::runtime {

// Takes the lock of `dir` (an existing directory) for this process, once per directory; warns
// (rank 0's log) when another process holds it, naming it. Never throws: a lock file that
// cannot be opened or locked (another user's, a file system without locks) is passed over.
void mark_checkpoint_directory_in_use(const std::filesystem::path& dir);

}  // namespace dlrun::runtime
