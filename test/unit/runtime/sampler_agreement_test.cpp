#include "sampler_agreement.hpp"

#include <vector>

#include <doctest/doctest.h>

using dlrun::runtime::SamplerTake;

namespace {

// The slots of `ranks`, summed as the vote's allreduce sums them.
std::vector<double> summed(const std::vector<SamplerTake>& ranks) {
  std::vector<double> sums(dlrun::runtime::k_sampler_slots, 0.0);
  for (const auto& take : ranks) {
    const auto slots = dlrun::runtime::sampler_agreement_slots(take);
    for (size_t i = 0; i < sums.size(); ++i) sums[i] += slots[i];
  }
  return sums;
}

}  // namespace

TEST_SUITE("runtime::SamplerAgreement") {
  TEST_CASE("only the ranks that took a batch are compared, and any difference among them is told") {
    const SamplerTake a{true, 64, 60000, 1, 0, 0};
    const SamplerTake none{};
    CHECK_FALSE(dlrun::runtime::sampler_disagreement(summed({a, a, a}).data(), a, 0));
    CHECK_FALSE(dlrun::runtime::sampler_disagreement(summed({a, none, a}).data(), a, 0));  // a rank without one
    CHECK_FALSE(dlrun::runtime::sampler_disagreement(summed({a, none}).data(), a, 0));     // one taker alone
    SamplerTake b = a;
    for (int64_t batch : {63, 65, 32, 128, 250, 314}) {  // every difference below 251
      b.global_batch = batch;
      CAPTURE(batch);
      CHECK(dlrun::runtime::sampler_disagreement(summed({a, a, b}).data(), a, 0));
    }
    // Two ranks each way, their sums equal, their squares not: still told.
    SamplerTake c = a, d = a;
    c.global_batch = 63;
    d.global_batch = 65;
    CHECK(dlrun::runtime::sampler_disagreement(summed({c, d}).data(), c, 0));
    SamplerTake e = a;
    e.epoch = 1;
    auto message = dlrun::runtime::sampler_disagreement(summed({a, e}).data(), e, 1);
    REQUIRE(message);
    CHECK(message->find("they are at different samples (rank 1: epoch 1, sample 0 of it)") != std::string::npos);
  }
}
