#pragma once
// Checkpoint: saves and restores everything a run needs to continue exactly — the tracked
// modules and optimizers, the ElasticSampler's position, the step counter, user values (such
// as the last loss) and runtime state (world size, restart count) — as one directory per
// step under `dir`. Rank 0 writes it under a temporary name, fsyncs every file, writes a
// MANIFEST of sizes and CRC-32s, and renames it into place; then all ranks pass a barrier.
// The last `keep_last` checkpoints are kept. restore() loads the newest checkpoint whose
// MANIFEST matches its files on every rank; a damaged one is skipped with a warning through
// the logger. Layout: docs/checkpoint-format.md.
//
// Ownership: keeps the modules (shared) and pointers to the optimizers and sampler, which
// must outlive it. Thread-safety: one training thread; save() and restore() are collective
// (every rank calls them at the same point).

#include <cstdint>
#include <filesystem>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "dlrun/context.hpp"

namespace torch::nn {
class Module;
}
namespace torch::optim {
class Optimizer;
}

namespace dlrun {

class ElasticSampler;

// Anything else a checkpoint should carry (AdaptiveBatch is one): its state as text, written
// to `state-NAME.txt` in the checkpoint and handed back on restore.
class Checkpointable {
 public:
  virtual ~Checkpointable() = default;
  virtual std::string checkpoint_state() const = 0;
  // Throws (any std::exception) when the text is not what checkpoint_state() writes.
  virtual void restore_checkpoint_state(const std::string& text) = 0;
  // Throws when restore_checkpoint_state(text) would refuse it, changing nothing: a restore
  // asks every object first, so that a refusal leaves all of them as they were. By default
  // nothing is checked ahead (the restore itself may still refuse).
  virtual void check_checkpoint_state(const std::string& text) const { (void)text; }
};

struct CheckpointOptions {
  int keep_last = 3;
};

struct CheckpointInfo {
  std::filesystem::path path;
  int64_t step = 0;
  int saved_world_size = 1;
  int saved_restart_count = 0;
  std::string saved_by_job;  // DLRUN_JOB_ID of the job that saved it (empty: not known)
  std::map<std::string, double> values;  // what save() was given
};

class Checkpoint {
 public:
  Checkpoint(Context context, std::filesystem::path dir, CheckpointOptions options = {});
  ~Checkpoint();

  // What save() writes and restore() loads; names become file names ([A-Za-z0-9_-]).
  void track(const std::string& name, std::shared_ptr<torch::nn::Module> module);
  void track(const std::string& name, torch::optim::Optimizer& optimizer);
  void track(ElasticSampler& sampler);
  void track(const std::string& name, Checkpointable& object);

  // Collective. Returns the checkpoint's directory. Throws CheckpointError.
  std::filesystem::path save(int64_t step, const std::map<std::string, double>& values = {});
  // Collective. Loads the newest valid checkpoint; nullopt when the directory has none.
  // Throws CheckpointError when checkpoints exist but none can be loaded.
  std::optional<CheckpointInfo> restore();

  const std::filesystem::path& directory() const;
  // Complete checkpoints (renamed into place), newest first; not verified.
  static std::vector<std::filesystem::path> list(const std::filesystem::path& dir);

 private:
  struct Impl;
  std::unique_ptr<Impl> m_impl;
};

}  // namespace dlrun
