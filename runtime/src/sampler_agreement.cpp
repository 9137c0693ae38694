#include "sampler_agreement.hpp"

#include <fmt/format.h>

namespace dlrun::runtime {
namespace {

constexpr uint64_t k_modulus = 251;  // a prime: two batch sizes that differ by less always differ here

uint64_t mixed(uint64_t a, uint64_t b) {
  uint64_t z = a * 0x9e3779b97f4a7c15ULL + b;
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ULL;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebULL;
  return z ^ (z >> 31);
}

// The four fields' residues, in the slots' order.
std::vector<uint64_t> residues(const SamplerTake& take) {
  return {static_cast<uint64_t>(take.global_batch) % k_modulus, static_cast<uint64_t>(take.dataset_size) % k_modulus,
          mixed(take.seed, 1) % k_modulus,
          mixed(static_cast<uint64_t>(take.epoch), static_cast<uint64_t>(take.position)) % k_modulus};
}

}  // namespace

std::vector<float> sampler_agreement_slots(const SamplerTake& mine) {
  std::vector<float> slots(k_sampler_slots, 0.0f);
  if (!mine.taken) return slots;
  slots[0] = 1.0f;
  const auto r = residues(mine);
  for (size_t i = 0; i < r.size(); ++i) {
    slots[1 + 2 * i] = static_cast<float>(r[i]);
    slots[2 + 2 * i] = static_cast<float>(r[i] * r[i]);
  }
  return slots;
}

std::optional<std::string> sampler_disagreement(const double* sums, const SamplerTake& mine, int rank) {
  const double takers = sums[0];
  if (takers < 1.5) return std::nullopt;  // one rank or none took a batch: nothing to compare
  bool differs[4] = {false, false, false, false};
  bool any = false;
  for (size_t i = 0; i < 4; ++i) {
    const double sum = sums[1 + 2 * i];
    const double squares = sums[2 + 2 * i];
    differs[i] = sum * sum != takers * squares;
    any = any || differs[i];
  }
  if (!any) return std::nullopt;
  std::string what;
  auto add = [&what](const std::string& part) { what += (what.empty() ? "" : "; ") + part; };
  if (differs[0]) {
    add(fmt::format("their global batch sizes differ (rank {}: {}); next(B), and a loader's batch size, is the "
                    "batch of all ranks together, which the sampler splits among them: give every rank the same",
                    rank, mine.global_batch));
  }
  if (differs[1]) {
    add(fmt::format("their dataset sizes differ (rank {}: {}); every rank sees the whole dataset and the sampler "
                    "picks each rank's share: do not split it by rank yourself",
                    rank, mine.dataset_size));
  }
  if (differs[2]) {
    add(fmt::format("their seeds differ (rank {}: {}); the seed orders each epoch and must be one for all ranks",
                    rank, mine.seed));
  }
  if (differs[3] && !differs[1] && !differs[2]) {
    add(fmt::format("they are at different samples (rank {}: epoch {}, sample {} of it); every rank must restore the "
                    "same checkpoint, or none",
                    rank, mine.epoch, mine.position));
  }
  return fmt::format(
      "the ranks' ElasticSamplers disagree at the first step, so samples would be lost or trained twice and the "
      "ranks would soon wait on each other for good: {}. Each rank's log names its own values",
      what);
}

}  // namespace dlrun::runtime
