#include "dlrun/checkpoint.hpp"

#include <torch/nn/module.h>
#include <torch/nn/modules/linear.h>
#include <torch/optim/adam.h>
#include <torch/utils.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <mutex>

#include "dlrun/data_parallel.hpp"
#include "dlrun/elastic_sampler.hpp"
#include "dlrun/runtime_errors.hpp"
#include "rank_threads.hpp"
#include "remove_tree.hpp"

// Last, in a block of its own: after every LibTorch header (glog's CHECK).
#include "doctest_after_torch.hpp"

namespace fs = std::filesystem;

namespace {

struct TempDir {
  fs::path path;
  TempDir() {
    path = fs::temp_directory_path() /
           ("dlrun-ckpt-" + std::to_string(::getpid()) + "-" + std::to_string(std::rand()));
  }
  ~TempDir() {
    std::error_code ignored;
    dlrun::runtime::remove_tree(path, ignored);
  }
};

dlrun::Context solo() {
  dlrun::InitOptions options;
  options.handle_signals = false;
  return dlrun::init(options);
}

struct Run {
  std::shared_ptr<torch::nn::LinearImpl> model;
  std::unique_ptr<torch::optim::Adam> adam;
  dlrun::ElasticSampler sampler{50, 0, 1, 3};
  explicit Run(uint64_t seed) {
    static std::mutex mutex;  // the default generator is process-wide
    std::lock_guard<std::mutex> lock(mutex);
    torch::manual_seed(seed);
    model = std::make_shared<torch::nn::LinearImpl>(4, 2);
    adam =
        std::make_unique<torch::optim::Adam>(model->parameters(), torch::optim::AdamOptions(0.1));
  }
  void train_step() {
    adam->zero_grad();
    model->forward(torch::ones({3, 4})).pow(2).sum().backward();
    adam->step();
    sampler.next(8);
  }
  void track(dlrun::Checkpoint& ckpt) {
    ckpt.track("model", model);
    ckpt.track("adam", *adam);
    ckpt.track(sampler);
  }
};

}  // namespace

TEST_SUITE("runtime::Checkpoint") {
  TEST_CASE("restore gives back model, optimizer, sampler, step and values") {
    TempDir dir;
    Run first(1);
    dlrun::Checkpoint ckpt(solo(), dir.path);
    first.track(ckpt);
    CHECK_FALSE(ckpt.restore().has_value());
    for (int i = 0; i < 3; ++i) first.train_step();
    ckpt.save(3, {{"loss", 0.125}});

    Run second(2);
    dlrun::Checkpoint again(solo(), dir.path);
    second.track(again);
    auto info = again.restore();
    REQUIRE(info.has_value());
    CHECK(info->step == 3);
    CHECK(info->values.at("loss") == 0.125);
    CHECK(info->saved_world_size == 1);
    CHECK(second.sampler.position() == 24);
    CHECK(torch::equal(second.model->weight, first.model->weight));
    // The optimizer's moments came back too: the next step is identical.
    first.train_step();
    second.train_step();
    CHECK(torch::equal(second.model->weight, first.model->weight));
  }

  TEST_CASE("keeps the last K and falls back from a damaged checkpoint") {
    TempDir dir;
    Run run(1);
    dlrun::CheckpointOptions options;
    options.keep_last = 2;
    dlrun::Checkpoint ckpt(solo(), dir.path, options);
    run.track(ckpt);
    for (int step = 1; step <= 4; ++step) {
      run.train_step();
      ckpt.save(step);
    }
    auto kept = dlrun::Checkpoint::list(dir.path);
    REQUIRE(kept.size() == 2);
    CHECK(kept[0].filename() == "step-000000000004");
    CHECK(kept[1].filename() == "step-000000000003");
    // A crash half-way through a save leaves only a temporary directory: never loaded.
    fs::create_directories(dir.path / ".tmp-step-000000000005.123");
    {
      std::ofstream damage(kept[0] / "module-model.pt",
                           std::ios::binary | std::ios::in | std::ios::out);
      damage.seekp(40);
      damage.put('\x7f');
    }
    Run other(5);
    dlrun::Checkpoint again(solo(), dir.path, options);
    other.track(again);
    auto info = again.restore();
    REQUIRE(info.has_value());
    CHECK(info->step == 3);
  }

  TEST_CASE("every damaged checkpoint is an error, not a fresh start") {
    TempDir dir;
    Run run(1);
    dlrun::Checkpoint ckpt(solo(), dir.path);
    run.track(ckpt);
    ckpt.save(1);
    fs::remove(dir.path / "step-000000000001" / "MANIFEST");
    CHECK_THROWS_AS(ckpt.restore(), dlrun::CheckpointError);
  }

  TEST_CASE("rank 0 writes, every rank loads the same checkpoint") {
    TempDir dir;
    std::vector<int64_t> steps(3, -1);
    dlrun::test::run_ranks(3, [&](dlrun::Context& ctx) {
      Run run(1);
      dlrun::Checkpoint ckpt(ctx, dir.path);
      run.track(ckpt);
      ckpt.save(7);
      Run fresh(9);
      dlrun::Checkpoint again(ctx, dir.path);
      fresh.track(again);
      steps[ctx.rank()] = again.restore().value().step;
    });
    CHECK(steps == std::vector<int64_t>{7, 7, 7});
    CHECK(dlrun::Checkpoint::list(dir.path).size() == 1);
  }
}

TEST_SUITE("runtime::Checkpoint") {
  TEST_CASE("a restore after DataParallel keeps the gradients reduced") {
    TempDir dir;
    {
      Run run(1);
      dlrun::Checkpoint ckpt(solo(), dir.path);
      run.track(ckpt);
      ckpt.save(1);
    }
    std::vector<at::Tensor> weights(2);
    dlrun::test::run_ranks(2, [&](dlrun::Context& ctx) {
      Run run(1);
      dlrun::DataParallel dp(run.model, ctx);
      dlrun::Checkpoint ckpt(ctx, dir.path);
      run.track(ckpt);
      REQUIRE(ckpt.restore().has_value());
      // Different data on each rank: only reduced gradients keep the weights equal.
      for (int step = 0; step < 2; ++step) {
        run.adam->zero_grad();
        dp.backward(run.model->forward(torch::full({3, 4}, 1.0 + ctx.rank())).pow(2).sum());
        dp.step(*run.adam);
      }
      weights[ctx.rank()] = run.model->weight.detach().clone();
    });
    CHECK(torch::equal(weights[0], weights[1]));
  }
}
