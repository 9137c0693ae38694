#include "dlrun/elastic_sampler.hpp"

#include <fmt/format.h>

#include "context_state.hpp"
#include "dlrun/log.hpp"
#include "dlrun/runtime_errors.hpp"

namespace dlrun {
namespace {

// splitmix64: a small, well-mixed generator whose output is fixed by its definition (unlike
// std::shuffle or std::uniform_int_distribution, which differ between standard libraries).
uint64_t splitmix64(uint64_t& state) {
  uint64_t z = (state += 0x9e3779b97f4a7c15ULL);
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ULL;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebULL;
  return z ^ (z >> 31);
}

// Uniform in [0, bound) by Lemire's multiply-and-reject.
uint64_t below(uint64_t& state, uint64_t bound) {
  uint64_t x = splitmix64(state);
  __uint128_t m = static_cast<__uint128_t>(x) * bound;
  auto low = static_cast<uint64_t>(m);
  if (low < bound) {
    uint64_t threshold = (0 - bound) % bound;
    while (low < threshold) {
      x = splitmix64(state);
      m = static_cast<__uint128_t>(x) * bound;
      low = static_cast<uint64_t>(m);
    }
  }
  return static_cast<uint64_t>(m >> 64);
}

void check_world(int rank, int world_size) {
  if (world_size < 1 || rank < 0 || rank >= world_size) {
    throw ConfigError(
        fmt::format("ElasticSampler: rank {} is not in a world of {}", rank, world_size));
  }
}

}  // namespace

ElasticSampler::ElasticSampler(int64_t dataset_size, const Context& context, uint64_t seed)
    : ElasticSampler(dataset_size, context.rank(), context.world_size(), seed) {
  m_context = context.shared_state();
}

ElasticSampler::ElasticSampler(int64_t dataset_size, int rank, int world_size, uint64_t seed)
    : m_rank(rank), m_world_size(world_size) {
  check_world(rank, world_size);
  if (dataset_size < 0) throw ConfigError("ElasticSampler: the dataset size is negative");
  m_state.dataset_size = dataset_size;
  m_state.seed = seed;
}

std::vector<int64_t> ElasticSampler::permutation(int64_t size, uint64_t seed, int64_t epoch) {
  std::vector<int64_t> out(static_cast<size_t>(size));
  for (int64_t i = 0; i < size; ++i) out[static_cast<size_t>(i)] = i;
  uint64_t state = seed;
  state = splitmix64(state) ^ static_cast<uint64_t>(epoch) * 0xd1b54a32d192ed03ULL;
  // Fisher-Yates from the back.
  for (int64_t i = size - 1; i > 0; --i) {
    auto j = static_cast<int64_t>(below(state, static_cast<uint64_t>(i) + 1));
    std::swap(out[static_cast<size_t>(i)], out[static_cast<size_t>(j)]);
  }
  return out;
}

std::pair<int64_t, int64_t> ElasticSampler::share(int64_t count, int rank, int world_size) {
  const int64_t base = count / world_size;
  const int64_t extra = count % world_size;
  const int64_t begin = rank * base + std::min<int64_t>(rank, extra);
  return {begin, begin + base + (rank < extra ? 1 : 0)};
}

void ElasticSampler::ensure_permutation() {
  if (m_permutation_epoch == m_state.epoch) return;
  m_permutation = permutation(m_state.dataset_size, m_state.seed, m_state.epoch);
  m_permutation_epoch = m_state.epoch;
}

std::optional<SampleBatch> ElasticSampler::next(int64_t global_batch_size) {
  if (global_batch_size < 1) throw ConfigError("ElasticSampler: the batch size must be at least 1");
  if (epoch_done()) {
    // A loop that never calls next_epoch() spins here (saving a checkpoint each time, say):
    // said once, by rank 0, after more calls than any loop that ends an epoch makes.
    if (++m_calls_past_the_end == 100 && m_rank == 0) {
      log::warn("ElasticSampler: epoch {} is over and next() was asked 100 times since: call next_epoch() to begin "
                "the next one",
                m_state.epoch + 1);
    }
    return std::nullopt;
  }
  ensure_permutation();
  SampleBatch batch;
  batch.epoch = m_state.epoch;
  batch.first_position = m_state.position;
  batch.global_size = std::min(global_batch_size, m_state.dataset_size - m_state.position);
  auto [begin, end] = share(batch.global_size, m_rank, m_world_size);
  batch.indices.assign(m_permutation.begin() + m_state.position + begin,
                       m_permutation.begin() + m_state.position + end);
  if (auto state = m_context.lock()) {
    state->last_take = {true, global_batch_size, m_state.dataset_size, m_state.seed, m_state.epoch, m_state.position};
  }
  m_state.position += batch.global_size;
  return batch;
}

void ElasticSampler::next_epoch() {
  ++m_state.epoch;
  m_state.position = 0;
  m_calls_past_the_end = 0;
}

void ElasticSampler::restore(const SamplerState& state) {
  if (state.dataset_size != m_state.dataset_size || state.seed != m_state.seed) {
    throw ConfigError(fmt::format(
        "ElasticSampler: the checkpoint was taken over {} samples with seed {}, this run has {} "
        "samples with seed {}: resume with the same data and seed, or start afresh",
        state.dataset_size, state.seed, m_state.dataset_size, m_state.seed));
  }
  if (state.position < 0 || state.position > state.dataset_size || state.epoch < 0) {
    throw ConfigError(fmt::format("ElasticSampler: position {} of epoch {} is out of range",
                                  state.position, state.epoch));
  }
  m_state = state;
  m_calls_past_the_end = 0;
}

}  // namespace dlrun
