#include "dlrun/adaptive_batch.hpp"

#include <ATen/CPUGeneratorImpl.h>
#include <ATen/Parallel.h>
#include <torch/nn/module.h>
#include <torch/nn/modules/linear.h>
#include <torch/optim/adam.h>
#include <torch/optim/sgd.h>
#include <torch/utils.h>

#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <mutex>
#include <set>
#include <nlohmann/json.hpp>
#include <torch/csrc/distributed/c10d/ProcessGroup.hpp>

#include "dlrun/data_parallel.hpp"
#include "dlrun/elastic_sampler.hpp"
#include "dlrun/runtime_errors.hpp"
#include "rank_threads.hpp"
#include "remove_tree.hpp"

// Last, in a block of its own: after every LibTorch header (glog's CHECK).
#include "doctest_after_torch.hpp"

namespace fs = std::filesystem;

namespace {

// y = x·w* + noise, and the model starts at w*: the true gradient is ~0 and every gradient is
// noise, so the noise scale is huge and larger batches are statistically free.
constexpr int64_t k_features = 8;

std::shared_ptr<torch::nn::Linear> make_model(double weight = 0.5) {
  static std::mutex mutex;  // the default generator is process-wide
  std::lock_guard<std::mutex> lock(mutex);
  torch::manual_seed(3);
  auto model = std::make_shared<torch::nn::Linear>(torch::nn::LinearOptions(k_features, 1));
  torch::NoGradGuard no_grad;
  (*model)->weight.fill_(weight);
  (*model)->bias.fill_(0);
  return model;
}

at::Tensor loss_of(torch::nn::LinearImpl& model, const std::vector<int64_t>& indices, int64_t step,
                   double scale) {
  auto gen = at::make_generator<at::CPUGeneratorImpl>(7000 + step * 131 +
                                                      (indices.empty() ? 0 : indices[0]));
  const auto n = static_cast<int64_t>(indices.size());
  auto x = at::randn({n, k_features}, gen);
  auto y = x.sum(1, true) * 0.5 + 3.0 * at::randn({n, 1}, gen);
  return (model.forward(x) - y).pow(2).sum() * scale;
}

// Trains split()'s micro-batches `parts` of step `step` through AdaptiveBatch::backward.
void train_parts(dlrun::AdaptiveBatch& adaptive, torch::nn::LinearImpl& model,
                 const std::vector<std::vector<int64_t>>& parts, int64_t step, double scale) {
  for (size_t i = 0; i < parts.size(); ++i)
    adaptive.backward(loss_of(model, parts[i], step, scale), i + 1 == parts.size());
}

dlrun::Context world_of_one() {
  auto state = std::make_shared<dlrun::runtime::ContextState>();
  state->uses_signals = false;
  return dlrun::Context(state);
}

// What the code under test writes to stderr (dlrun::log's warnings) while it lives; text()
// puts stderr back and returns it.
class StderrCapture {
 public:
  StderrCapture() : m_file(std::tmpfile()), m_saved(::dup(STDERR_FILENO)) {
    REQUIRE(m_file != nullptr);
    REQUIRE(m_saved >= 0);
    REQUIRE(::dup2(::fileno(m_file), STDERR_FILENO) >= 0);
  }
  StderrCapture(const StderrCapture&) = delete;
  StderrCapture& operator=(const StderrCapture&) = delete;
  ~StderrCapture() { restore(); }
  std::string text() {
    restore();
    std::string out;
    std::rewind(m_file);
    char buffer[4096];
    for (size_t n; (n = std::fread(buffer, 1, sizeof buffer, m_file)) > 0;) out.append(buffer, n);
    return out;
  }

 private:
  void restore() {
    if (m_saved < 0) return;
    ::dup2(m_saved, STDERR_FILENO);
    ::close(m_saved);
    m_saved = -1;
  }
  std::FILE* m_file;
  int m_saved;
};

size_t count_of(const std::string& text, const std::string& what) {
  size_t count = 0;
  for (size_t at = text.find(what); at != std::string::npos; at = text.find(what, at + 1)) ++count;
  return count;
}

// One rank training make_model(weight) with SGD at 0.01, its steps timed on a clock the test
// moves (`seconds`). Not movable: options() hands AdaptiveBatch a clock that reads this one.
struct OneRank {
  explicit OneRank(double weight = 0.5)
      : ctx(world_of_one()),
        model(make_model(weight)),
        dp(model->ptr(), ctx),
        sgd((*model)->parameters(), torch::optim::SGDOptions(0.01)) {}
  OneRank(const OneRank&) = delete;
  OneRank& operator=(const OneRank&) = delete;
  dlrun::AdaptiveBatchOptions options() {
    dlrun::AdaptiveBatchOptions o;
    o.log_every = 0;
    o.clock = [this] { return seconds; };
    return o;
  }
  dlrun::Context ctx;
  std::shared_ptr<torch::nn::Linear> model;
  dlrun::DataParallel dp;
  torch::optim::SGD sgd;
  double seconds = 0;
};

struct Run {
  std::vector<int64_t> batches;  // global batch of every step
  int64_t measure_every = 0;
  double noise_scale = 0, lr = 0, lr_factor = 0, progress = 0, noise_floor = 0;
  std::string state;
};

// Trains `steps` optimizer steps with AdaptiveBatch, the way docs/adaptive.md shows, with SGD
// (with `momentum`) or Adam at learning rate `lr`, from weights `weight` (0.5: the optimum).
Run train(dlrun::Context& ctx, int steps, dlrun::AdaptiveBatchOptions options,
          const std::string& restore_from = "", bool adam = false, double lr = 0.01,
          double weight = 0.5, double momentum = 0, bool whole_steps = false) {
  auto model = make_model(weight);
  dlrun::DataParallel dp(model->ptr(), ctx);
  std::unique_ptr<torch::optim::Optimizer> optimizer;
  if (adam) {
    optimizer =
        std::make_unique<torch::optim::Adam>((*model)->parameters(), torch::optim::AdamOptions(lr));
  } else {
    optimizer = std::make_unique<torch::optim::SGD>(
        (*model)->parameters(), torch::optim::SGDOptions(lr).momentum(momentum));
  }
  torch::optim::Optimizer& sgd = *optimizer;
  // Step times are the test's, not the machine's: 10 µs a sample, and a fixed cost of 4 ms per
  // optimizer step (as data loading or kernel launches are), so larger batches are faster per
  // sample by the same margin on any machine, however busy.
  double seconds = 0;
  options.clock = [&seconds] { return seconds; };
  dlrun::AdaptiveBatch adaptive(ctx, dp, sgd, options);
  if (!restore_from.empty()) adaptive.restore_checkpoint_state(restore_from);
  dlrun::ElasticSampler sampler(1 << 20, ctx, 1);
  Run run;
  for (int s = 0; s < steps; ++s) {
    auto batch = sampler.next(adaptive.global_batch());
    // whole_steps: a loop that trains each step's batch at once, not split()'s micro-batches.
    auto parts = whole_steps ? std::vector<std::vector<int64_t>>{batch->indices}
                             : adaptive.split(batch->indices);
    for (size_t i = 0; i < parts.size(); ++i) {
      seconds += 1e-5 * static_cast<double>(parts[i].size());
      adaptive.backward(loss_of(**model, parts[i], s, batch->loss_scale(ctx.world_size())),
                        i + 1 == parts.size());
    }
    seconds += 0.004;
    adaptive.step(batch->global_size);
    sgd.zero_grad();
    run.batches.push_back(batch->global_size);
  }
  run.noise_scale = adaptive.stats().noise_scale;
  run.lr_factor = adaptive.stats().lr_factor;
  run.lr = sgd.param_groups()[0].options().get_lr();
  run.measure_every = adaptive.stats().measure_every;
  run.progress = adaptive.progress();
  run.noise_floor = adaptive.stats().noise_floor;
  run.state = adaptive.checkpoint_state();
  return run;
}

}  // namespace

TEST_SUITE("runtime::AdaptiveBatch") {
  TEST_CASE("split gives accum_steps micro-batches in order, short ones at an epoch's end") {
    dlrun::Context ctx = world_of_one();
    auto model = make_model();
    dlrun::DataParallel dp(model->ptr(), ctx);
    torch::optim::SGD sgd((*model)->parameters(), torch::optim::SGDOptions(0.01));
    dlrun::AdaptiveBatchOptions options;
    options.initial_batch = 16;
    options.max_micro_batch = 5;
    dlrun::AdaptiveBatch adaptive(ctx, dp, sgd, options);
    CHECK(adaptive.shape().global_batch == 16);
    CHECK(adaptive.shape().accum_steps == 4);
    CHECK(adaptive.shape().micro_batch == 4);
    std::vector<int64_t> share(10);
    for (int i = 0; i < 10; ++i) share[i] = 100 + i;
    auto parts = adaptive.split(share);
    REQUIRE(parts.size() == 4);
    CHECK(parts[0] == std::vector<int64_t>{100, 101, 102});
    CHECK(parts[3] == std::vector<int64_t>{108, 109});
    CHECK(adaptive.split({}).size() == 4);
  }

  TEST_CASE("a step of more samples than the batch chosen is refused: its rate was scaled for another") {
    dlrun::Context ctx = world_of_one();
    auto model = make_model();
    dlrun::DataParallel dp(model->ptr(), ctx);
    torch::optim::SGD sgd((*model)->parameters(), torch::optim::SGDOptions(0.01));
    dlrun::AdaptiveBatchOptions options;
    options.initial_batch = 16;
    dlrun::AdaptiveBatch adaptive(ctx, dp, sgd, options);
    std::vector<int64_t> batch(32);
    for (int i = 0; i < 32; ++i) batch[i] = i;
    adaptive.backward(loss_of(**model, batch, 0, 1.0 / 32), true);
    CHECK_THROWS_WITH_AS(adaptive.step(32),
                         doctest::Contains("AdaptiveBatch::step: this step trained 32 samples, more than the global "
                                           "batch AdaptiveBatch chose (16)"),
                         dlrun::ConfigError);
  }

  TEST_CASE("options that allow no batch are refused, saying which") {
    dlrun::Context ctx = world_of_one();
    auto model = make_model();
    dlrun::DataParallel dp(model->ptr(), ctx);
    torch::optim::SGD sgd((*model)->parameters(), torch::optim::SGDOptions(0.01));
    dlrun::AdaptiveBatchOptions options;
    options.initial_batch = 512;
    options.max_batch = 256;
    CHECK_THROWS_WITH_AS(dlrun::AdaptiveBatch(ctx, dp, sgd, options),
                         "AdaptiveBatch: max_batch (256) is below initial_batch (512)",
                         dlrun::ConfigError);
    options.max_batch = 1024;
    options.min_improvement = -0.1;
    CHECK_THROWS_WITH_AS(dlrun::AdaptiveBatch(ctx, dp, sgd, options),
                         "AdaptiveBatch: min_improvement must be at least 0", dlrun::ConfigError);
    // A rank's memory limit without accumulation bounds the initial batch too (it was exceeded).
    options.min_improvement = 0.05;
    options.initial_batch = 64;
    options.max_micro_batch = 8;
    options.accumulation = false;
    CHECK_THROWS_WITH_AS(dlrun::AdaptiveBatch(ctx, dp, sgd, options),
                         "AdaptiveBatch: initial_batch (64) is 64 samples a rank on 1 rank(s), above max_micro_batch "
                         "(8), and accumulation is off",
                         dlrun::ConfigError);
  }

  TEST_CASE("a restored batch beyond this run's limits goes on within them") {
    dlrun::Context ctx = world_of_one();
    auto model = make_model();
    dlrun::DataParallel dp(model->ptr(), ctx);
    torch::optim::SGD sgd((*model)->parameters(), torch::optim::SGDOptions(0.01));
    dlrun::AdaptiveBatchOptions wide;
    wide.initial_batch = 128;
    wide.max_batch = 256;
    wide.log_every = 0;
    const std::string state = dlrun::AdaptiveBatch(ctx, dp, sgd, wide).checkpoint_state();
    dlrun::AdaptiveBatchOptions narrow = wide;  // lowered on resume (an out-of-memory error)
    narrow.initial_batch = 8;
    narrow.max_batch = 16;
    dlrun::AdaptiveBatch resumed(ctx, dp, sgd, narrow);
    resumed.restore_checkpoint_state(state);
    CHECK(resumed.shape().global_batch == 16);
  }

  TEST_CASE("2 ranks measure the same noise scale and switch to a larger batch at the same step") {
    at::set_num_threads(1);
    dlrun::AdaptiveBatchOptions options;
    options.initial_batch = 8;
    options.max_batch = 256;
    options.replan_every = 5;
    options.rule = dlrun::ScalingRule::adascale;
    options.log_every = 0;
    std::vector<Run> runs(2);
    dlrun::test::run_ranks(
        2, [&](dlrun::Context& ctx) { runs[ctx.rank()] = train(ctx, 30, options); });
    CHECK(runs[0].batches == runs[1].batches);
    CHECK(runs[0].noise_scale == doctest::Approx(runs[1].noise_scale));
    CHECK(runs[0].noise_scale > 20);  // the gradient is mostly noise
    CHECK(runs[0].batches.front() == 8);
    CHECK(runs[0].batches.back() > 8);
    // AdaScale: the learning rate follows the gain (φ/M0 + 1) / (φ/M + 1), in (1, M/M0].
    const double phi = runs[0].noise_scale, batch = static_cast<double>(runs[0].batches.back());
    CHECK(runs[0].lr_factor == doctest::Approx((phi / 8 + 1) / (phi / batch + 1)));
    CHECK(runs[0].lr_factor > 1);
    CHECK(runs[0].lr_factor <= batch / 8 + 1e-9);
    CHECK(runs[0].lr == doctest::Approx(0.01 * runs[0].lr_factor));
    CHECK(runs[0].progress > 30);  // larger batches count for more than one step
    // Each decision goes at most 2x beyond the largest batch trained at (the model is fitted
    // to the sizes measured).
    int64_t largest = 0;
    for (int64_t b : runs[0].batches) {
      if (largest > 0) CHECK(b <= 2 * largest);
      largest = std::max(largest, b);
    }
    CHECK(largest > 16);  // it did grow more than once
  }

  TEST_CASE("replan_every 0 (the default) decides every 25 steps on a GPU, every 50 on the CPU") {
    at::set_num_threads(1);
    for (const bool gpu : {false, true}) {
      CAPTURE(gpu);
      auto state = std::make_shared<dlrun::runtime::ContextState>();
      state->uses_signals = false;
      dlrun::Context ctx(state);
      auto model = make_model();
      dlrun::DataParallel dp(model->ptr(), ctx);
      torch::optim::SGD sgd((*model)->parameters(), torch::optim::SGDOptions(0.01));
      dlrun::AdaptiveBatchOptions options;
      REQUIRE(options.replan_every == 0);
      options.initial_batch = 8;
      options.max_batch = 256;
      options.log_every = 0;
      double seconds = 0;
      options.clock = [&seconds] { return seconds; };
      // The cadence is chosen from the rank's device when AdaptiveBatch is made; the steps
      // below train on the CPU whatever it says.
      state->cuda_index = gpu ? 0 : -1;
      dlrun::AdaptiveBatch adaptive(ctx, dp, sgd, options);
      state->cuda_index = -1;
      dlrun::ElasticSampler sampler(1 << 20, ctx, 1);
      std::vector<int64_t> switches;  // the steps at which the batch changed
      int64_t batch_before = 8;
      for (int s = 0; s < 80; ++s) {
        auto batch = sampler.next(adaptive.global_batch());
        if (batch->global_size != batch_before) switches.push_back(s);
        batch_before = batch->global_size;
        auto parts = adaptive.split(batch->indices);
        for (size_t i = 0; i < parts.size(); ++i) {
          seconds += 1e-5 * static_cast<double>(parts[i].size());
          adaptive.backward(loss_of(**model, parts[i], s, batch->loss_scale(1)), i + 1 == parts.size());
        }
        seconds += 0.004;
        adaptive.step(batch->global_size);
        sgd.zero_grad();
      }
      // The gradient is all noise and a step's fixed cost dominates: each decision grows it.
      REQUIRE(!switches.empty());
      CHECK(switches.front() == (gpu ? 25 : 50));
      if (gpu) {
        REQUIRE(switches.size() >= 2);
        CHECK(switches[1] == 50);
      }
    }
  }

  TEST_CASE("a world of one measures the noise scale on the two halves of a measured step") {
    at::set_num_threads(1);
    // Trains 10 steps of 8 (micro-batches of at most `max_micro`); returns the sizes of every
    // step's micro-batches, and the noise scale's observations.
    auto run = [](int64_t max_micro) {
      dlrun::Context ctx = world_of_one();
      auto model = make_model();
      dlrun::DataParallel dp(model->ptr(), ctx);
      torch::optim::SGD sgd((*model)->parameters(), torch::optim::SGDOptions(0.01));
      dlrun::AdaptiveBatchOptions options;
      options.initial_batch = 8;
      options.max_micro_batch = max_micro;
      options.replan_every = 1000;  // keep the batch: only the measurement is under test
      options.log_every = 0;
      dlrun::AdaptiveBatch adaptive(ctx, dp, sgd, options);
      dlrun::ElasticSampler sampler(1 << 20, ctx, 1);
      std::vector<std::vector<size_t>> sizes;
      StderrCapture capture;
      for (int s = 0; s < 10; ++s) {
        auto batch = sampler.next(adaptive.global_batch());
        auto parts = adaptive.split(batch->indices);
        sizes.emplace_back();
        std::vector<int64_t> joined;
        for (const auto& part : parts) {
          sizes.back().push_back(part.size());
          joined.insert(joined.end(), part.begin(), part.end());
        }
        CHECK(joined == batch->indices);  // the same samples, in order
        train_parts(adaptive, **model, parts, s, batch->loss_scale(1));
        adaptive.step(batch->global_size);
        sgd.zero_grad();
      }
      CHECK(capture.text().find("came without") == std::string::npos);  // no fallback
      CHECK(adaptive.stats().noise_scale > 20);  // the gradient is mostly noise
      CHECK(adaptive.progress() == doctest::Approx(10));  // at the initial batch every gain is 1
      const std::string state = adaptive.checkpoint_state();
      const auto at = state.find("\nobservations ");
      REQUIRE(at != std::string::npos);
      return std::make_pair(sizes, std::stol(state.substr(at + 14)));
    };
    // One micro-batch a step: the warm-up trains every other step (1, 3, ...) as two of 4.
    const auto [whole, whole_observations] = run(0);
    for (size_t s = 0; s < whole.size(); ++s) {
      CAPTURE(s);
      CHECK(whole[s] == (s % 2 == 1 ? std::vector<size_t>{4, 4} : std::vector<size_t>{8}));
    }
    CHECK(whole_observations == 5);
    // Four micro-batches a step: the first two against the last two, every step, as trained.
    const auto [parts, parts_observations] = run(2);
    for (const auto& step : parts) CHECK(step == std::vector<size_t>{2, 2, 2, 2});
    CHECK(parts_observations == 10);
    // Three (3, 3, 2): the first against the other two, unequal halves.
    const auto [odd, odd_observations] = run(3);
    for (const auto& step : odd) CHECK(step == std::vector<size_t>{3, 3, 2});
    CHECK(odd_observations == 10);
  }

  TEST_CASE("a step left half-way leaves no half gradient behind for the next one") {
    at::set_num_threads(1);
    // Six steps of 4 micro-batches (measured on the first 2 against the last 2); with `abandon`,
    // every other step is first left after 1 micro-batch (an exception, a Python loop's
    // break) and begun again: the same samples at the same weights, so the same measurements.
    auto run = [](bool abandon) {
      OneRank one;
      dlrun::AdaptiveBatchOptions options = one.options();
      options.initial_batch = 8;
      options.max_micro_batch = 2;
      options.replan_every = 1000;
      dlrun::AdaptiveBatch adaptive(one.ctx, one.dp, one.sgd, options);
      dlrun::ElasticSampler sampler(1 << 20, one.ctx, 1);
      StderrCapture capture;
      for (int s = 0; s < 6; ++s) {
        auto batch = sampler.next(adaptive.global_batch());
        auto parts = adaptive.split(batch->indices);
        REQUIRE(parts.size() == 4);
        if (abandon && s % 2 == 0) {
          adaptive.backward(loss_of(**one.model, parts[0], s, batch->loss_scale(1)), false);
          one.sgd.zero_grad();
          parts = adaptive.split(batch->indices);
        }
        train_parts(adaptive, **one.model, parts, s, batch->loss_scale(1));
        adaptive.step(batch->global_size);
        one.sgd.zero_grad();
      }
      CHECK(capture.text().find("came without") == std::string::npos);
      return adaptive.checkpoint_state();
    };
    const std::string plain = run(false), abandoned = run(true);
    CHECK(plain.find("\nobservations 6") != std::string::npos);
    CHECK(abandoned == plain);  // the noise scale's averages, to the last digit
  }

  TEST_CASE("in a world of one, the noise scale is not inflated by the weights' move between steps") {
    // Far from the optimum at a high rate, consecutive steps' gradients differ by more than
    // their noise: measured on consecutive steps (a loop that does not train split()'s halves),
    // that difference counted as noise; two halves of one step see the same weights, as two
    // ranks do.
    at::set_num_threads(1);
    dlrun::AdaptiveBatchOptions options;
    options.initial_batch = 256;
    options.max_batch = 256;
    options.log_every = 0;
    options.rule = dlrun::ScalingRule::adascale;
    dlrun::Context one = world_of_one();
    const Run halves = train(one, 40, options, "", false, 0.1, -2.0);
    std::vector<Run> two(2);
    dlrun::test::run_ranks(2, [&](dlrun::Context& ctx) {
      two[ctx.rank()] = train(ctx, 40, options, "", false, 0.1, -2.0);
    });
    const Run consecutive = train(one, 40, options, "", false, 0.1, -2.0, 0, true);
    MESSAGE("noise scale, world of one: ", halves.noise_scale, " (consecutive steps ",
            consecutive.noise_scale, "), two ranks: ", two[0].noise_scale);
    CHECK(halves.noise_scale < 2 * two[0].noise_scale);
    CHECK(halves.noise_scale > two[0].noise_scale / 2);
    CHECK(consecutive.noise_scale > 2 * two[0].noise_scale);  // the bias halving removes
  }

  TEST_CASE(
      "after the first 100 steps, the noise scale is measured every measure_every-th step, in a "
      "world of one and of two") {
    at::set_num_threads(1);
    auto observations = [](const Run& run) {
      const auto at = run.state.find("\nobservations ");
      REQUIRE(at != std::string::npos);
      return std::stol(run.state.substr(at + 14));
    };
    dlrun::AdaptiveBatchOptions options;
    options.initial_batch = 8;
    options.replan_every = 1000;
    options.log_every = 0;
    options.rule = dlrun::ScalingRule::adascale;
    dlrun::Context one = world_of_one();
    options.measure_every = 1;
    // A world of one trains its measured steps as two halves: every other step in the warm-up
    // (the steps between time the shape), then every measure_every-th, never two in a row.
    CHECK(observations(train(one, 113, options)) == 50 + 7);  // 1, 3, …, 99, then 100, 102, …, 112
    options.measure_every = 4;
    Run sparse = train(one, 113, options);
    CHECK(observations(sparse) == 50 + 4);  // 1, 3, …, 99, then 100, 104, 108, 112
    CHECK(sparse.noise_scale > 20);
    std::vector<Run> two(2);
    dlrun::test::run_ranks(
        2, [&](dlrun::Context& ctx) { two[ctx.rank()] = train(ctx, 113, options); });
    CHECK(observations(two[0]) == 100 + 4);  // steps 0…99, then 100, 104, 108, 112
    CHECK(two[0].noise_scale == doctest::Approx(two[1].noise_scale));
    CHECK(two[0].noise_scale > 20);
    options.measure_every = 0;
    CHECK_THROWS_AS(train(one, 1, options), dlrun::ConfigError);
  }

  TEST_CASE(
      "the cadence is stretched to the fewest steps that keep measuring within 0.5% of a step, "
      "at most 128") {
    at::set_num_threads(1);
    // Held at one size, every step takes 4.08 ms on the test's clock, and a measured step `extra`
    // more; in a world of one so does the step before it (the pair's first gradient).
    auto cadence_with = [](double extra) {
      OneRank one;
      dlrun::AdaptiveBatchOptions options = one.options();
      options.initial_batch = 8;
      options.max_batch = 8;
      dlrun::AdaptiveBatch adaptive(one.ctx, one.dp, one.sgd, options);
      dlrun::ElasticSampler sampler(1 << 20, one.ctx, 1);
      for (int s = 0; s < 400; ++s) {
        const int64_t step = adaptive.stats().step, every = adaptive.stats().measure_every;
        const bool measured = step < 100 || step % every == 0 || (step + 1) % every == 0;
        auto batch = sampler.next(adaptive.global_batch());
        one.seconds += 0.004 + 1e-5 * static_cast<double>(batch->indices.size());
        if (measured) one.seconds += extra;
        adaptive.backward(loss_of(**one.model, batch->indices, s, batch->loss_scale(1)), true);
        adaptive.step(batch->global_size);
        one.sgd.zero_grad();
      }
      return adaptive.stats().measure_every;
    };
    const double step = 0.00408, budget = 0.005;
    CHECK(cadence_with(0) == 4);  // free measurements: options.measure_every
    for (const double extra : {0.00005, 0.0001, 0.0002}) {
      CAPTURE(extra);
      const int64_t every = cadence_with(extra);
      // What measuring costs per step: two steps of each cadence's period cost `extra` more.
      CHECK(2 * extra / (static_cast<double>(every) * step) <= budget * 1.0001);
      CHECK(2 * extra / (static_cast<double>(every - 1) * step) > budget);
    }
    CHECK(cadence_with(0.01) == 128);  // 981 steps would keep the budget: the cap
  }

  TEST_CASE("the checkpointed state restores batch, progress and noise scale, in another world") {
    at::set_num_threads(1);
    dlrun::AdaptiveBatchOptions options;
    options.initial_batch = 8;
    options.max_batch = 256;
    options.replan_every = 5;
    options.log_every = 0;
    dlrun::Context one = world_of_one();
    Run first = train(one, 16, options);
    REQUIRE(first.batches.back() > 8);
    // Same world: the next step runs at the saved batch, with the saved progress.
    Run again = train(one, 1, options, first.state);
    CHECK(again.batches.front() == first.batches.back());
    CHECK(again.progress > first.progress);
    // Two ranks: the saved batch is re-planned for the new count at the first step, by both.
    std::vector<Run> two(2);
    dlrun::test::run_ranks(
        2, [&](dlrun::Context& ctx) { two[ctx.rank()] = train(ctx, 3, options, first.state); });
    CHECK(two[0].batches == two[1].batches);
    CHECK(two[0].batches.front() == first.batches.back());
    CHECK_THROWS_AS(train(one, 1, options, "not a state"), std::invalid_argument);
    // With a line every step: the first step's re-plan (a warm-up at the old shape) writes no
    // line of its own, nor an empty one after it; every line covers steps.
    const fs::path dir =
        fs::temp_directory_path() / ("dlrun-adaptive-restore-" + std::to_string(::getpid()));
    fs::create_directories(dir);
    options.log_every = 1;
    options.metrics_path = (dir / "metrics.jsonl").string();
    dlrun::test::run_ranks(
        2, [&](dlrun::Context& ctx) { two[ctx.rank()] = train(ctx, 3, options, first.state); });
    std::ifstream in(dir / "metrics.jsonl");
    std::vector<nlohmann::json> lines;
    for (std::string line; std::getline(in, line);) lines.push_back(nlohmann::json::parse(line));
    dlrun::runtime::remove_tree(dir);
    MESSAGE("batches after the restore: ", two[0].batches[0], " ", two[0].batches[1]);
    CHECK(two[0].batches[1] != two[0].batches[0]);  // the re-plan switched
    REQUIRE(lines.size() == 2);                      // steps 2 and 3, not the warm-up
    for (const auto& m : lines) {
      CAPTURE(m.dump());
      CHECK(m.at("global_batch").get<int64_t>() == two[0].batches[1]);
      CHECK(m.at("seconds").get<double>() > 0);
      CHECK(m.at("samples_per_sec").get<double>() > 0);
    }
  }

  TEST_CASE("the shared test vector: what AdaptiveBatch decides for the same data and step times") {
    // test/vectors/adaptive_batch.json; test_python.SharedVector checks the Python module
    // against the same file (docs/python.md).
    at::set_num_threads(1);
    std::ifstream in(fs::path(DLRUN_TEST_VECTORS) / "adaptive_batch.json");
    REQUIRE(in);
    const auto vector = nlohmann::json::parse(in);
    for (const auto& c : vector.at("cases")) {
      CAPTURE(c.at("name").get<std::string>());
      dlrun::AdaptiveBatchOptions options;
      options.initial_batch = c.at("initial_batch");
      options.max_batch = c.at("max_batch");
      options.replan_every = c.at("replan_every");
      options.measure_every = c.at("measure_every");
      options.log_every = 0;
      options.rule = *dlrun::parse_scaling_rule(c.value("rule", std::string("auto")));
      dlrun::Context one = world_of_one();
      Run run = train(one, c.at("steps"), options, "", c.at("optimizer") == "adam", c.at("lr"),
                      c.at("initial_weight"), c.value("momentum", 0.0));
      nlohmann::json runs = nlohmann::json::array();  // [batch, steps at it] in order
      for (int64_t b : run.batches) {
        if (runs.empty() || runs.back()[0] != b) runs.push_back({b, 0});
        runs.back()[1] = runs.back()[1].get<int64_t>() + 1;
      }
      const auto& expected = c.at("expected");
      MESSAGE("got ", nlohmann::json{{"batches", runs},
                                     {"noise_scale", run.noise_scale},
                                     {"lr_factor", run.lr_factor},
                                     {"progress", run.progress},
                                     {"noise_floor", run.noise_floor}}
                          .dump());
      CHECK(runs == expected.at("batches"));
      CHECK(run.noise_scale ==
            doctest::Approx(expected.at("noise_scale").get<double>()).epsilon(1e-3));
      CHECK(run.lr_factor == doctest::Approx(expected.at("lr_factor").get<double>()).epsilon(1e-3));
      CHECK(run.progress == doctest::Approx(expected.at("progress").get<double>()).epsilon(1e-3));
      CHECK(run.noise_floor ==
            doctest::Approx(expected.at("noise_floor").get<double>()).epsilon(1e-3));
    }
  }

  TEST_CASE(
      "an adaptive optimizer at square-root rates is rated by the square-root efficiency, and SGD "
      "or another rule, by Pollux's") {
    at::set_num_threads(1);
    struct Case {
      bool adam;
      dlrun::ScalingRule rule;
      bool root;  // the square-root efficiency expected
    };
    for (const Case c : {Case{true, dlrun::ScalingRule::automatic, true},
                         Case{true, dlrun::ScalingRule::sqrt, true},
                         Case{true, dlrun::ScalingRule::adascale, false},
                         Case{false, dlrun::ScalingRule::adam, false}}) {
      CAPTURE(c.adam);
      CAPTURE(static_cast<int>(c.rule));
      const fs::path dir =
          fs::temp_directory_path() / ("dlrun-adaptive-efficiency-" + std::to_string(::getpid()));
      fs::create_directories(dir);
      dlrun::AdaptiveBatchOptions options;
      options.initial_batch = 8;
      options.max_batch = 256;
      options.replan_every = 10;
      options.measure_every = 4;
      options.log_every = 10;
      options.rule = c.rule;
      options.metrics_path = (dir / "metrics.jsonl").string();
      dlrun::Context one = world_of_one();
      const Run run = train(one, 160, options, "", c.adam, c.adam ? 0.003 : 0.001, 0.3);
      std::ifstream in(dir / "metrics.jsonl");
      int grown = 0;
      for (std::string line; std::getline(in, line);) {
        const auto m = nlohmann::json::parse(line);
        const double batch = m.at("global_batch").get<double>();
        if (batch <= 8) continue;
        ++grown;
        const double phi = m.at("noise_scale").get<double>();
        const double pollux = (phi + 8) / (phi + batch);
        CHECK(m.at("efficiency").get<double>() ==
              doctest::Approx(c.root ? std::sqrt(pollux) : pollux).epsilon(1e-9));
      }
      dlrun::runtime::remove_tree(dir);
      CHECK(grown > 0);  // the batch grew, so the efficiencies differ
      CHECK(run.batches.back() > 8);
    }
  }

  TEST_CASE("rank 0 appends a metrics.jsonl line every log_every steps") {
    at::set_num_threads(1);
    const fs::path dir =
        fs::temp_directory_path() / ("dlrun-adaptive-" + std::to_string(::getpid()));
    fs::create_directories(dir);
    dlrun::AdaptiveBatchOptions options;
    options.initial_batch = 8;
    options.log_every = 2;
    options.metrics_path = (dir / "metrics.jsonl").string();
    dlrun::Context ctx = world_of_one();
    train(ctx, 6, options);
    std::ifstream in(dir / "metrics.jsonl");
    std::vector<std::string> lines;
    for (std::string line; std::getline(in, line);) lines.push_back(line);
    dlrun::runtime::remove_tree(dir);
    REQUIRE(lines.size() == 3);
    for (const char* key :
         {"\"time\":", "\"step\":6", "\"global_batch\":8", "\"micro_batch\":8", "\"accum_steps\":1",
          "\"lr_factor\":", "\"samples_per_sec\":", "\"noise_scale\":", "\"efficiency\":1",
          "\"goodput\":", "\"progress\":"}) {
      CAPTURE(key);
      CHECK(lines[2].find(key) != std::string::npos);
    }
    CHECK(lines[2].front() == '{');
    CHECK(lines[2].back() == '}');
    // Steps after the last line (a stop, the end) get a line when the AdaptiveBatch goes: 7
    // steps, lines at 2, 4, 6 and 7. None is added when the last line is the last step's.
    fs::create_directories(dir);
    train(ctx, 7, options);
    std::ifstream again(dir / "metrics.jsonl");
    lines.clear();
    for (std::string line; std::getline(again, line);) lines.push_back(line);
    dlrun::runtime::remove_tree(dir);
    REQUIRE(lines.size() == 4);
    CHECK(lines[3].find("\"step\":7,") != std::string::npos);
  }

  TEST_CASE("every metrics.jsonl line describes one batch: a switch is logged before it") {
    // A step costs 10 ms plus 10 µs a sample, so goodput grows the batch. Each line's seconds
    // and samples/s must be those of the steps since the line before it at the batch it names,
    // whether a switch falls on a logging step or between two (the line written at a switch
    // named the next batch, and a line after one mixed two).
    at::set_num_threads(1);
    for (const int log_every : {1, 7}) {
      CAPTURE(log_every);
      const fs::path dir =
          fs::temp_directory_path() / ("dlrun-adaptive-lines-" + std::to_string(::getpid()));
      fs::create_directories(dir);
      OneRank one;
      dlrun::AdaptiveBatchOptions options = one.options();
      options.initial_batch = 16;
      options.max_batch = 1024;
      options.replan_every = 20;
      options.log_every = log_every;
      options.metrics_path = (dir / "metrics.jsonl").string();
      {
        dlrun::AdaptiveBatch adaptive(one.ctx, one.dp, one.sgd, options);
        dlrun::ElasticSampler sampler(1 << 20, one.ctx, 1);
        for (int s = 0; s < 200; ++s) {
          auto batch = sampler.next(adaptive.global_batch());
          one.seconds += 0.01 + 1e-5 * static_cast<double>(batch->indices.size());
          adaptive.backward(loss_of(**one.model, batch->indices, s, batch->loss_scale(1)), true);
          adaptive.step(batch->global_size);
          one.sgd.zero_grad();
        }
      }
      std::ifstream in(dir / "metrics.jsonl");
      std::set<double> batches;
      double previous_step = 0;
      int lines = 0, off_cadence = 0;
      for (std::string line; std::getline(in, line); ++lines) {
        const auto m = nlohmann::json::parse(line);
        const double batch = m.at("global_batch").get<double>();
        const double step = m.at("step").get<double>();
        const double seconds = (step - previous_step) * (0.01 + 1e-5 * batch);
        CAPTURE(line);
        CHECK(m.at("seconds").get<double>() == doctest::Approx(seconds));
        CHECK(m.at("samples_per_sec").get<double>() ==
              doctest::Approx(batch * (step - previous_step) / seconds));
        off_cadence += static_cast<int64_t>(step) % log_every != 0;
        batches.insert(batch);
        previous_step = step;
      }
      dlrun::runtime::remove_tree(dir);
      CHECK(lines >= 200 / log_every);
      CHECK(batches.size() >= 3);  // the batch changed: the lines at the switches were checked
      if (log_every == 7) CHECK(off_cadence > 0);  // switches between logging steps were logged
    }
  }

  TEST_CASE("the loss reported is that of the steps since the last metrics line, not of the last decision") {
    // Decisions 1000 steps apart (a cheap step lengthens the interval, too): a loss that rises
    // meanwhile (a run that diverges) shows at the next metrics line, not 1000 steps later.
    at::set_num_threads(1);
    OneRank one(0.5);
    dlrun::AdaptiveBatchOptions options = one.options();
    options.initial_batch = 16;
    options.max_batch = 16;
    options.replan_every = 1000;
    options.log_every = 5;
    dlrun::AdaptiveBatch adaptive(one.ctx, one.dp, one.sgd, options);
    dlrun::ElasticSampler sampler(1 << 20, one.ctx, 1);
    for (int s = 0; s < 40; ++s) {
      auto batch = sampler.next(adaptive.global_batch());
      one.seconds += 1e-5 * static_cast<double>(batch->indices.size());
      const at::Tensor l = loss_of(**one.model, batch->indices, s, batch->loss_scale(1));
      adaptive.backward(l, true);
      // What the run reports: 1 for the first 30 steps, then 50.
      adaptive.observe_loss(at::full({}, s < 30 ? 1.0 : 50.0, at::kDouble) - l.detach().to(at::kDouble));
      adaptive.step(batch->global_size);
      one.sgd.zero_grad();
      if (s == 24) CHECK(adaptive.stats().loss == doctest::Approx(1.0));
    }
    CHECK(adaptive.stats().loss == doctest::Approx(50.0));
  }

  TEST_CASE(
      "with the noise floor, a loss that has levelled off grows the batch where goodput "
      "alone keeps it, and without a (finite) loss observed, goodput alone decides") {
    // At the optimum (every gradient noise), the loss only fluctuates; steps cost 10 µs a
    // sample and nothing fixed, so no batch is faster per sample and goodput alone stays at
    // the initial batch. Under the square-root rule a larger batch trains towards a lower
    // noise floor (the rate per sample falls as 1/√B): worth growing for.
    at::set_num_threads(1);
    enum class Loss { passed, not_passed, nan };
    auto run_with = [](bool noise_floor, Loss loss, const std::string& restore_from = "",
                       int steps = 400, double weight = 0.5) {
      OneRank one(weight);
      dlrun::AdaptiveBatchOptions options = one.options();
      options.initial_batch = 16;
      options.max_batch = 1024;
      options.replan_every = 20;
      options.measure_every = 1;
      options.rule = dlrun::ScalingRule::sqrt;
      options.noise_floor = noise_floor;
      dlrun::AdaptiveBatch adaptive(one.ctx, one.dp, one.sgd, options);
      if (!restore_from.empty()) adaptive.restore_checkpoint_state(restore_from);
      dlrun::ElasticSampler sampler(1 << 20, one.ctx, 1);
      std::vector<int64_t> batches;
      for (int s = 0; s < steps; ++s) {
        auto batch = sampler.next(adaptive.global_batch());
        one.seconds += 1e-5 * static_cast<double>(batch->indices.size());
        const at::Tensor l = loss_of(**one.model, batch->indices, s, batch->loss_scale(1));
        if (loss == Loss::passed) {
          adaptive.backward(l, true);
        } else {
          one.dp.backward(l);  // a caller that runs the backward itself
          if (loss == Loss::nan) adaptive.observe_loss(l.detach() * std::nan(""));
        }
        adaptive.step(batch->global_size);
        one.sgd.zero_grad();
        batches.push_back(batch->global_size);
      }
      return std::make_tuple(batches, adaptive.stats(), adaptive.checkpoint_state());
    };
    const auto [plain, plain_stats, plain_state] = run_with(false, Loss::passed);
    const auto [floored, floored_stats, floored_state] = run_with(true, Loss::passed);
    const int64_t without = *std::max_element(plain.begin(), plain.end());
    const int64_t with = *std::max_element(floored.begin(), floored.end());
    MESSAGE("largest batch: ", without, " by goodput alone, ", with, " with the noise floor");
    CHECK(without <= 32);  // the throughput model's prior tries one larger size, then stays
    CHECK(with >= 4 * without);
    CHECK(plain_stats.noise_floor == 0);  // not computed without the option
    CHECK(floored_stats.noise_floor > 0);
    CHECK(floored_stats.loss > 0);  // the mean loss since the last metrics line
    CHECK(plain_stats.loss > 0);    // reported without the noise floor too
    // No loss passed, or only NaN: the option on decides as goodput alone does.
    for (const Loss l : {Loss::not_passed, Loss::nan}) {
      const auto [batches, stats, state] = run_with(true, l);
      CHECK(batches == plain);
      CHECK(stats.noise_floor == 0);
    }
    // Restored, the run has no fall measured yet. Away from the optimum (weights 0: a true
    // gradient, so a small noise scale) goodput alone would go back to 16 there; until the
    // floor can judge again it may only grow the batch.
    const auto [grown, grown_stats, grown_state] = run_with(true, Loss::passed, "", 400, 0.0);
    const auto [restored, restored_stats, restored_state] =
        run_with(true, Loss::passed, grown_state, 60, 0.0);
    const auto [unfloored, unfloored_stats, unfloored_state] =
        run_with(false, Loss::passed, grown_state, 60, 0.0);
    CHECK(restored.front() == grown.back());
    CHECK(*std::min_element(restored.begin(), restored.end()) == grown.back());
    CHECK(*std::min_element(unfloored.begin(), unfloored.end()) < grown.back());
    // The loss's last fall is in the checkpoint: the floor judges at the first decision after
    // the restore (it waited for two intervals at one batch, and goodput alone decided).
    CHECK(grown_state.find("fall_rate ") != std::string::npos);
    const auto [first, first_stats, first_state] = run_with(true, Loss::passed, grown_state, 25, 0.0);
    CHECK(first_stats.noise_floor > 0);
    // And what it knew is readable before the first step (stats() read 0 and 1 until then).
    const auto [none, none_stats, none_state] = run_with(true, Loss::passed, grown_state, 0, 0.0);
    CHECK(none_stats.noise_scale == doctest::Approx(grown_stats.noise_scale));
    CHECK(none_stats.noise_scale > 0);
    CHECK(none_stats.gain == doctest::Approx(grown_stats.gain));
    CHECK(none_stats.lr_factor == doctest::Approx(grown_stats.lr_factor));
    CHECK(none_stats.step == grown_stats.step);
  }

  TEST_CASE("a training loss that runs away is warned of once: 10x its lowest, or not finite") {
    // The loss the caller observes is scaled up from step 100 (or made NaN): each run warns
    // once, in words that say which; a loss that stays within 10x of its lowest, never.
    at::set_num_threads(1);
    auto run_with = [](double scale_after_100) {
      OneRank one(0.0);
      dlrun::AdaptiveBatchOptions options = one.options();
      options.initial_batch = 16;
      options.max_batch = 16;
      options.replan_every = 20;
      dlrun::AdaptiveBatch adaptive(one.ctx, one.dp, one.sgd, options);
      dlrun::ElasticSampler sampler(1 << 20, one.ctx, 1);
      StderrCapture capture;
      for (int s = 0; s < 200; ++s) {
        auto batch = sampler.next(adaptive.global_batch());
        one.seconds += 1e-5 * static_cast<double>(batch->indices.size());
        const at::Tensor l = loss_of(**one.model, batch->indices, s, batch->loss_scale(1));
        one.dp.backward(l);
        adaptive.observe_loss(s < 100 ? l.detach() : l.detach() * scale_after_100);
        adaptive.step(batch->global_size);
        one.sgd.zero_grad();
      }
      return capture.text();
    };
    const std::string warning = "adaptive batch: the training loss (";
    const std::string grown = run_with(1e3);
    CHECK(count_of(grown, warning) == 1);
    CHECK(grown.find("x its lowest (") != std::string::npos);
    CHECK(grown.find("training may be diverging at global batch 16, where the learning rate is x1.00") !=
          std::string::npos);
    const std::string nan = run_with(std::nan(""));
    CHECK(count_of(nan, warning) == 1);
    CHECK(nan.find("the training loss (nan) is not finite: training may be diverging") != std::string::npos);
    CHECK(count_of(run_with(2.0), warning) == 0);
  }

  TEST_CASE("a training loss that runs away after the batch grew takes the batch back, and no larger after") {
    // The noise floor grows the batch (as in the test above); from step 300 the loss observed
    // is 1000x: the batch goes back to where the loss was lowest and never beyond it again.
    at::set_num_threads(1);
    OneRank one(0.5);
    dlrun::AdaptiveBatchOptions options = one.options();
    options.initial_batch = 16;
    options.max_batch = 1024;
    options.replan_every = 20;
    options.measure_every = 1;
    options.rule = dlrun::ScalingRule::sqrt;
    options.noise_floor = true;
    dlrun::AdaptiveBatch adaptive(one.ctx, one.dp, one.sgd, options);
    dlrun::ElasticSampler sampler(1 << 20, one.ctx, 1);
    StderrCapture capture;
    std::vector<int64_t> batches;
    for (int s = 0; s < 600; ++s) {
      auto batch = sampler.next(adaptive.global_batch());
      one.seconds += 1e-5 * static_cast<double>(batch->indices.size());
      const at::Tensor l = loss_of(**one.model, batch->indices, s, batch->loss_scale(1));
      one.dp.backward(l);
      adaptive.observe_loss(s < 300 ? l.detach() : l.detach() * 1e3);
      adaptive.step(batch->global_size);
      one.sgd.zero_grad();
      batches.push_back(batch->global_size);
    }
    const std::string text = capture.text();
    const int64_t before = *std::max_element(batches.begin(), batches.begin() + 300);
    REQUIRE(before > 16);
    const auto at = text.find("going back to global batch ");
    REQUIRE(at != std::string::npos);
    const int64_t cap = std::stoll(text.substr(at + std::string("going back to global batch ").size()));
    MESSAGE("grew to ", before, ", went back to ", cap);
    CHECK(cap < before);
    CHECK(batches.back() <= cap);
    CHECK(*std::max_element(batches.begin() + 400, batches.end()) <= cap);
    CHECK(text.find("and no larger from now on (its checkpoints keep this)") != std::string::npos);
    // A restart (a resize, a resume) keeps the cap: a checkpoint of a batch above it (one
    // saved before the loss ran away, say, with the cap of a later run) restores below it.
    std::string state = adaptive.checkpoint_state();
    REQUIRE(state.find("batch_cap " + std::to_string(cap)) != std::string::npos);
    const auto line = state.find("global_batch ");
    state.replace(line, state.find('\n', line) - line, "global_batch 1024");
    OneRank again(0.5);
    dlrun::AdaptiveBatch restored(again.ctx, again.dp, again.sgd, options);
    restored.restore_checkpoint_state(state);
    CHECK(restored.global_batch() == cap);
  }
}
