#pragma once
// ElasticSampler: which samples each rank trains on, so that training can stop anywhere and
// resume with any number of ranks without skipping or repeating a sample.
//
// Each epoch visits a permutation of [0, dataset_size) that depends only on (seed, epoch).
// The sampler's position is a global sample index into that permutation: a step takes the
// next global_batch_size entries and splits them into contiguous per-rank shares (sizes
// differ by at most one; the first ranks get the extra ones). The position, not the rank,
// is what a checkpoint stores, so a resumed run with another world size continues at the same
// sample. The last batch of an epoch is short; some ranks may get no sample in it.
// Pure logic, no I/O, no LibTorch. Thread-safety: none (one per training loop).

#include <cstdint>
#include <memory>
#include <optional>
#include <vector>

#include "dlrun/context.hpp"

namespace dlrun {

struct SamplerState {
  int64_t epoch = 0;
  int64_t position = 0;  // samples of this epoch already taken, over all ranks
  uint64_t seed = 0;
  int64_t dataset_size = 0;
};

struct SampleBatch {
  std::vector<int64_t> indices;  // this rank's share, dataset indices
  int64_t global_size = 0;       // samples in this step over all ranks
  int64_t epoch = 0;
  int64_t first_position = 0;  // global position of the step's first sample
  // Scale for a loss summed over this rank's samples so that averaging over the ranks (what
  // DataParallel does) gives the mean over the global batch: world_size / global_size.
  double loss_scale(int world_size) const {
    return global_size > 0 ? static_cast<double>(world_size) / static_cast<double>(global_size)
                           : 0.0;
  }
};

class ElasticSampler {
 public:
  ElasticSampler(int64_t dataset_size, const Context& context, uint64_t seed);
  // Without a Context: for tests and for computing another rank's share.
  ElasticSampler(int64_t dataset_size, int rank, int world_size, uint64_t seed);

  // The next step's share of this rank, or nullopt when the epoch is exhausted (then call
  // next_epoch()). global_batch_size is the same on every rank.
  std::optional<SampleBatch> next(int64_t global_batch_size);
  // Starts the next epoch at position 0.
  void next_epoch();

  int64_t epoch() const { return m_state.epoch; }
  int64_t position() const { return m_state.position; }
  int64_t dataset_size() const { return m_state.dataset_size; }
  bool epoch_done() const { return m_state.position >= m_state.dataset_size; }

  SamplerState state() const { return m_state; }
  // Continues from a saved state (any world size). Throws ConfigError when the state belongs
  // to another dataset size or seed.
  void restore(const SamplerState& state);

  // The permutation of an epoch (deterministic in seed and epoch, the same on every platform).
  static std::vector<int64_t> permutation(int64_t size, uint64_t seed, int64_t epoch);
  // [begin, end) of rank's share of a global batch of `count` samples.
  static std::pair<int64_t, int64_t> share(int64_t count, int rank, int world_size);

 private:
  void ensure_permutation();

  SamplerState m_state;
  int m_rank;
  int m_world_size;
  // The Context's state, told what each next() takes: DataParallel's first step checks that the
  // ranks agree (sampler_agreement.hpp). Weak: a sampler does not keep the world alive.
  std::weak_ptr<runtime::ContextState> m_context;
  std::vector<int64_t> m_permutation;
  int64_t m_permutation_epoch = -1;
  int64_t m_calls_past_the_end = 0;  // next() of an epoch that is over, since next_epoch()
};

}  // namespace dlrun
