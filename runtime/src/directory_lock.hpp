#pragma once
// A checkpoint directory is one run's: rank 0 holds an exclusive lock on DIR/.lock (flock(2))
// from restore() to the end of its process, so that a second run that would save into the same
// directory (two submitted jobs with one checkpoint_dir) is refused at its start instead of
// resuming from the first one's checkpoints while both run. The kernel drops the lock with the
// process, however it ends. Thread-safe.

#include <filesystem>

namespace dlrun::runtime {

// Takes the lock of `dir` (an existing directory) for this process, once; later calls for the
// same directory return at once. CheckpointError when another process holds it, naming its
// pid. A file system without locks (ENOLCK, EOPNOTSUPP) goes unlocked.
void lock_checkpoint_directory(const std::filesystem::path& dir);

}  // namespace dlrun::runtime
