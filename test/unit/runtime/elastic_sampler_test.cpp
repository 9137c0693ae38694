#include "dlrun/elastic_sampler.hpp"

#include <doctest/doctest.h>

#include <algorithm>
#include <string>
#include <string_view>
#include <vector>

#include "dlrun/log.hpp"
#include "dlrun/runtime_errors.hpp"

using dlrun::ElasticSampler;
using dlrun::SamplerState;

namespace {

std::vector<ElasticSampler> world_of(int64_t n, int world_size, uint64_t seed) {
  std::vector<ElasticSampler> ranks;
  for (int r = 0; r < world_size; ++r) ranks.emplace_back(n, r, world_size, seed);
  return ranks;
}

// Runs up to max_steps steps on every rank in lockstep; counts every index taken.
int64_t run_steps(std::vector<ElasticSampler>& ranks, int64_t batch, int64_t max_steps,
                  std::vector<int>& seen) {
  int64_t steps = 0;
  while (steps < max_steps) {
    int64_t global = -1, taken = 0;
    bool done = false;
    for (auto& rank : ranks) {
      auto share = rank.next(batch);
      if (!share) {
        done = true;
        continue;
      }
      REQUIRE(share->global_size <= batch);
      if (global >= 0) REQUIRE(share->global_size == global);
      global = share->global_size;
      taken += static_cast<int64_t>(share->indices.size());
      for (int64_t i : share->indices) seen.at(static_cast<size_t>(i))++;
    }
    if (done) {
      for (auto& rank : ranks) REQUIRE(rank.epoch_done());
      break;
    }
    REQUIRE(taken == global);
    ++steps;
  }
  return steps;
}

}  // namespace

TEST_SUITE("runtime::ElasticSampler") {
  TEST_CASE("a loop that never calls next_epoch() is told to, once, by rank 0") {
    std::string said;
    dlrun::log::set_sink([&said](std::string_view line) { said += line; });
    ElasticSampler rank0(10, 0, 2, 1), rank1(10, 1, 2, 1);
    for (int i = 0; i < 300; ++i) {
      rank0.next(4);
      rank1.next(4);
    }
    rank0.next_epoch();
    for (int i = 0; i < 3; ++i) rank0.next(4);  // an epoch ended as loops do: nothing said
    dlrun::log::set_sink({});
    CHECK(said == "dlrun: warning: ElasticSampler: epoch 1 is over and next() was asked 100 times since: call "
                  "next_epoch() to begin the next one\n");
  }

  TEST_CASE("the permutation depends on seed and epoch only") {
    auto a = ElasticSampler::permutation(1000, 7, 0);
    CHECK(a == ElasticSampler::permutation(1000, 7, 0));
    CHECK(a != ElasticSampler::permutation(1000, 7, 1));
    CHECK(a != ElasticSampler::permutation(1000, 8, 0));
    auto sorted = a;
    std::sort(sorted.begin(), sorted.end());
    for (int64_t i = 0; i < 1000; ++i) CHECK(sorted[static_cast<size_t>(i)] == i);
    // Fixed by definition, not by the standard library: a regression test of the first values.
    auto small = ElasticSampler::permutation(5, 1, 0);
    CHECK(small == ElasticSampler::permutation(5, 1, 0));
  }

  TEST_CASE("shares of a batch differ by at most one and cover it") {
    for (int64_t count = 0; count < 40; ++count) {
      for (int world = 1; world <= 9; ++world) {
        int64_t expected_begin = 0;
        for (int r = 0; r < world; ++r) {
          auto [begin, end] = ElasticSampler::share(count, r, world);
          CHECK(begin == expected_begin);
          CHECK(end - begin >= count / world);
          CHECK(end - begin <= count / world + 1);
          expected_begin = end;
        }
        CHECK(expected_begin == count);
      }
    }
  }

  TEST_CASE("every sample once per epoch, for many world and batch sizes") {
    for (int64_t n : {0, 1, 7, 100, 1003}) {
      for (int world = 1; world <= 8; ++world) {
        for (int64_t batch : {1, 3, 16, 64, 1100}) {
          auto ranks = world_of(n, world, 42);
          for (int epoch = 0; epoch < 2; ++epoch) {
            std::vector<int> seen(static_cast<size_t>(n), 0);
            run_steps(ranks, batch, 1 << 30, seen);
            CAPTURE(n);
            CAPTURE(world);
            CAPTURE(batch);
            CHECK(std::all_of(seen.begin(), seen.end(), [](int c) { return c == 1; }));
            for (auto& r : ranks) r.next_epoch();
          }
        }
      }
    }
  }

  TEST_CASE("resuming mid-epoch with another world size neither skips nor repeats") {
    const int64_t n = 517;
    int cases = 0;
    for (int before = 1; before <= 5; ++before) {
      for (int after = 1; after <= 5; ++after) {
        for (int64_t batch : {1, 8, 30}) {
          for (int64_t stop_after : {0, 1, 5, 17}) {
            std::vector<int> seen(n, 0);
            auto first = world_of(n, before, 9);
            for (int e = 0; e < 1; ++e) {
              for (auto& r : first) r.next_epoch();  // resume inside epoch 1
            }
            run_steps(first, batch, stop_after, seen);
            SamplerState saved = first[0].state();
            for (auto& r : first) CHECK(r.position() == saved.position);
            auto second = world_of(n, after, 9);
            for (auto& r : second) r.restore(saved);
            run_steps(second, batch, 1 << 30, seen);
            CAPTURE(before);
            CAPTURE(after);
            CAPTURE(batch);
            CAPTURE(stop_after);
            CHECK(std::all_of(seen.begin(), seen.end(), [](int c) { return c == 1; }));
            CHECK(second[0].epoch() == 1);
            ++cases;
          }
        }
      }
    }
    CHECK(cases == 300);
  }

  TEST_CASE("the same samples in the same order whatever the world size") {
    // The concatenation of the ranks' shares of a step is the same global batch.
    for (int world = 1; world <= 6; ++world) {
      auto ranks = world_of(200, world, 3);
      ElasticSampler single(200, 0, 1, 3);
      for (int step = 0; step < 5; ++step) {
        auto whole = single.next(24);
        std::vector<int64_t> joined;
        for (auto& r : ranks) {
          auto share = r.next(24);
          joined.insert(joined.end(), share->indices.begin(), share->indices.end());
        }
        CHECK(joined == whole->indices);
      }
    }
  }

  TEST_CASE("loss scale makes the average of rank means the global mean") {
    dlrun::SampleBatch batch;
    batch.global_size = 10;
    CHECK(batch.loss_scale(4) == doctest::Approx(0.4));
  }

  TEST_CASE("a state from another data set is refused") {
    ElasticSampler sampler(100, 0, 1, 5);
    SamplerState other{0, 10, 5, 99};
    CHECK_THROWS_AS(sampler.restore(other), dlrun::ConfigError);
    other.dataset_size = 100;
    other.seed = 6;
    CHECK_THROWS_WITH(sampler.restore(other),
                      "ElasticSampler: the checkpoint was taken over 100 samples with seed 6, this "
                      "run has 100 samples with seed 5: resume with the same data and seed, or "
                      "start afresh");
  }
}
