#pragma once
// Whether the ranks' ElasticSamplers agree, checked once, at a DataParallel's first synced
// step, in the small allreduce that carries the stop vote (bucket_hook.hpp): no collective of
// its own, so a check that some rank runs late or never cannot hang the others. Each rank adds
// what its last sampler take was (global batch, dataset size, seed, position), as small residues
// and their squares: summed over the ranks, Σh² · n = (Σh)² exactly when the n ranks that took a
// batch agree (floats hold these sums exactly up to 256 ranks). A rank with a different batch
// size, dataset or seed trains other ranks' samples or none, silently, and hangs the job later.
// Pure logic, no LibTorch.

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

namespace dlrun::runtime {

// What the last ElasticSampler::next() of a Context took (ContextState::last_take).
struct SamplerTake {
  bool taken = false;
  int64_t global_batch = 0;  // what next() was asked for
  int64_t dataset_size = 0;
  uint64_t seed = 0;
  int64_t epoch = 0;
  int64_t position = 0;  // the step's first sample in its epoch
};

// The check's slots of the vote: [took, then per field its residue and the residue's square].
constexpr size_t k_sampler_slots = 9;
// Above this many ranks the sums of squares would not be exact in a float: not checked.
constexpr int k_sampler_check_most_ranks = 256;

std::vector<float> sampler_agreement_slots(const SamplerTake& mine);

// Given the slots summed over the ranks: the message of a disagreement, naming this rank's
// values (each rank's log shows its own), or nullopt when the ranks that took a batch agree.
std::optional<std::string> sampler_disagreement(const double* sums, const SamplerTake& mine, int rank);

}  // namespace dlrun::runtime
