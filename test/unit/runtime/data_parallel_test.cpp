#include "dlrun/data_parallel.hpp"

#include <ATen/CPUGeneratorImpl.h>
#include <ATen/Parallel.h>
#include <torch/nn/functional/loss.h>
#include <torch/nn/module.h>
#include <torch/nn/modules/linear.h>
#include <torch/optim/sgd.h>
#include <torch/utils.h>

#include <atomic>
#include <mutex>
#include <string>

#include "dlrun/elastic_sampler.hpp"
#include "dlrun/runtime_errors.hpp"
#include "rank_threads.hpp"

// Last, in a block of its own: after every LibTorch header (glog's CHECK).
#include "doctest_after_torch.hpp"

namespace {

struct NetImpl : torch::nn::Module {
  torch::nn::Linear a{nullptr}, b{nullptr}, c{nullptr};
  NetImpl() {
    a = register_module("a", torch::nn::Linear(6, 16));
    b = register_module("b", torch::nn::Linear(16, 8));
    c = register_module("c", torch::nn::Linear(8, 3));
  }
  torch::Tensor forward(const torch::Tensor& x) {
    return c->forward(torch::tanh(b->forward(torch::tanh(a->forward(x)))));
  }
};

std::shared_ptr<NetImpl> make_net(uint64_t seed) {
  // The default generator is process-wide: ranks-as-threads must not interleave here.
  static std::mutex mutex;
  std::lock_guard<std::mutex> lock(mutex);
  torch::manual_seed(seed);
  return std::make_shared<NetImpl>();
}

// The data of step `step`: a global batch of `size` samples, the same for every rank.
std::pair<torch::Tensor, torch::Tensor> global_batch(int step, int64_t size) {
  auto gen = at::make_generator<at::CPUGeneratorImpl>(1000 + step);
  auto x = at::randn({size, 6}, gen);
  auto y = at::randint(0, 3, {size}, gen);
  return {x, y};
}

torch::Tensor summed_loss(NetImpl& net, const torch::Tensor& x, const torch::Tensor& y) {
  return torch::nn::functional::cross_entropy(
      net.forward(x), y, torch::nn::functional::CrossEntropyFuncOptions().reduction(torch::kSum));
}

std::vector<torch::Tensor> flat_params(NetImpl& net) {
  std::vector<torch::Tensor> out;
  for (auto& p : net.parameters()) out.push_back(p.detach().clone());
  return out;
}

// One process, whole batches, mean loss: the reference.
std::vector<torch::Tensor> train_single(int steps, int64_t batch) {
  auto net = make_net(1);
  torch::optim::SGD sgd(net->parameters(), torch::optim::SGDOptions(0.1).momentum(0.9));
  for (int s = 0; s < steps; ++s) {
    auto [x, y] = global_batch(s, batch);
    sgd.zero_grad();
    (summed_loss(*net, x, y) / batch).backward();
    sgd.step();
  }
  return flat_params(*net);
}

void check_close(const std::vector<torch::Tensor>& got, const std::vector<torch::Tensor>& want) {
  REQUIRE(got.size() == want.size());
  for (size_t i = 0; i < got.size(); ++i) {
    double diff = (got[i] - want[i]).abs().max().item<double>();
    double scale = want[i].abs().max().item<double>();
    CAPTURE(i);
    CHECK(diff <= 1e-5 * std::max(scale, 1.0));
  }
}

}  // namespace

TEST_SUITE("runtime::DataParallel") {
  TEST_CASE("2 and 3 ranks train the same weights as one process on the whole batch") {
    at::set_num_threads(1);
    const int steps = 6;
    for (bool shm : {true, false}) {  // gradients through shared memory, or through Gloo
      for (int world : {2, 3}) {
        for (int64_t batch : {12, 10}) {  // 10 over 3 ranks: shares of 4, 3 and 3
          CAPTURE(shm);
          CAPTURE(world);
          CAPTURE(batch);
          dlrun::InitOptions init;
          init.shared_memory_allreduce = shm;
          auto want = train_single(steps, batch);
          std::vector<std::vector<torch::Tensor>> got(world);
          std::vector<size_t> buckets(world);
          dlrun::test::run_ranks(
              world,
              [&](dlrun::Context& ctx) {
                auto net = make_net(1 + ctx.rank() * 17);  // rank 0's weights must win
                dlrun::DataParallelOptions options;
                options.first_bucket_cap_bytes = 100;  // several buckets for a tiny model
                options.bucket_cap_bytes = 300;
                dlrun::DataParallel dp(net, ctx, options);
                torch::optim::SGD sgd(net->parameters(),
                                      torch::optim::SGDOptions(0.1).momentum(0.9));
                for (int s = 0; s < steps; ++s) {
                  auto [x, y] = global_batch(s, batch);
                  auto [begin, end] = dlrun::ElasticSampler::share(batch, ctx.rank(), world);
                  dlrun::SampleBatch share;
                  share.global_size = batch;
                  sgd.zero_grad();
                  dp.backward(summed_loss(*net, x.slice(0, begin, end), y.slice(0, begin, end)) *
                              share.loss_scale(world));
                  dp.step(sgd);
                }
                got[ctx.rank()] = flat_params(*net);
                buckets[ctx.rank()] = dp.bucket_count();
              },
              init);
          for (int r = 0; r < world; ++r) check_close(got[r], want);
          CHECK(buckets[0] >= 3);
        }
      }
    }
  }

  TEST_CASE("a module with no trainable parameter is refused on every rank, before any exchange") {
    // LibTorch's check of the ranks' parameters crashed (SIGSEGV) on an empty list.
    for (int world : {1, 2}) {
      CAPTURE(world);
      std::atomic<int> refused{0};
      dlrun::test::run_ranks(world, [&](dlrun::Context& ctx) {
        auto net = make_net(1);
        for (auto& p : net->parameters()) p.set_requires_grad(false);
        try {
          dlrun::DataParallel dp(net, ctx);
        } catch (const dlrun::ConfigError& e) {
          if (std::string(e.what()) == "DataParallel: the module has no parameters that require gradients")
            ++refused;
        }
      });
      CHECK(refused == world);
    }
  }

  TEST_CASE("ranks that built different models are told so, without LibTorch's backtrace") {
    std::vector<std::string> messages(2);
    dlrun::test::run_ranks(2, [&](dlrun::Context& ctx) {
      auto model = std::make_shared<torch::nn::LinearImpl>(4, ctx.rank() == 0 ? 2 : 3);
      try {
        dlrun::DataParallel dp(model, ctx);
      } catch (const dlrun::ConfigError& e) {
        messages[ctx.rank()] = e.what();
      }
    });
    for (const auto& message : messages) {
      CAPTURE(message);
      CHECK(message.find("the ranks built different models (their shapes differ)") != std::string::npos);
      CHECK(message.find("every rank must build the same model") != std::string::npos);
      CHECK(message.find("Exception raised from") == std::string::npos);
      CHECK(message.find("frame #") == std::string::npos);
    }
  }

  TEST_CASE("ranks whose models differ in dtype are told so at once (it waited for the collective timeout)") {
    std::vector<std::string> messages(2);
    dlrun::test::run_ranks(2, [&](dlrun::Context& ctx) {
      auto model = std::make_shared<torch::nn::LinearImpl>(4, 2);
      if (ctx.rank() == 1) model->to(torch::kDouble);
      try {
        dlrun::DataParallel dp(model, ctx);
      } catch (const dlrun::ConfigError& e) {
        messages[ctx.rank()] = e.what();
      }
    });
    CHECK(messages[0].find("(their dtypes differ)") != std::string::npos);
    CHECK(messages[0].find("rank 0 has 2 parameters (10 values) and 0 buffers, of dtype Float") != std::string::npos);
    CHECK(messages[1].find("rank 1 has 2 parameters (10 values) and 0 buffers, of dtype Double") != std::string::npos);
  }

  TEST_CASE("a parameter unfrozen after the DataParallel was made is refused: it would train on each rank alone") {
    std::vector<std::string> messages(2);
    dlrun::test::run_ranks(2, [&](dlrun::Context& ctx) {
      struct Two : torch::nn::Module {
        std::shared_ptr<torch::nn::LinearImpl> a, b;
      };
      auto two = std::make_shared<Two>();
      two->a = two->register_module("a", std::make_shared<torch::nn::LinearImpl>(4, 4));
      two->b = two->register_module("b", std::make_shared<torch::nn::LinearImpl>(4, 1));
      for (auto& p : two->a->parameters()) p.set_requires_grad(false);
      dlrun::DataParallel dp(two, ctx);
      dp.backward(two->b->forward(two->a->forward(torch::ones({2, 4}))).sum());  // frozen: fine
      for (auto& p : two->a->parameters()) p.set_requires_grad(true);
      try {
        dp.backward(two->b->forward(two->a->forward(torch::ones({2, 4}))).sum());
      } catch (const dlrun::ConfigError& e) {
        messages[ctx.rank()] = e.what();
      }
    });
    for (const auto& message : messages) {
      CAPTURE(message);
      CHECK(message.find("DataParallel: parameter 'a.weight' was unfrozen after the DataParallel was made") !=
            std::string::npos);
      CHECK(message.find("make a new DataParallel (and optimizer) after changing requires_grad") != std::string::npos);
    }
  }

  TEST_CASE("a parameter left out of a step's loss is named in dlrun's words, not LibTorch's") {
    std::atomic<int> named{0};
    dlrun::test::run_ranks(2, [&](dlrun::Context& ctx) {
      auto unused = std::make_shared<torch::nn::LinearImpl>(4, 1);
      struct Two : torch::nn::Module {
        std::shared_ptr<torch::nn::LinearImpl> a, b;
      };
      auto two = std::make_shared<Two>();
      two->a = two->register_module("a", std::make_shared<torch::nn::LinearImpl>(4, 1));
      two->b = two->register_module("b", unused);
      dlrun::DataParallel dp(two, ctx);
      try {
        for (int step = 0; step < 2; ++step) {
          dp.backward(two->a->forward(torch::ones({2, 4})).sum());  // b takes no part
          dp.synchronize();
        }
      } catch (const dlrun::ConfigError& e) {
        if (std::string(e.what()).find("got none in the last step (not used in the loss: 'b.weight', 'b.bias')") !=
            std::string::npos)
          ++named;
      }
    });
    CHECK(named == 2);
  }

  TEST_CASE("no_sync accumulates locally and the next backward reduces the sum") {
    at::set_num_threads(1);
    // Reference: one process, two micro-batches of 8 accumulated, mean over 16.
    auto ref = make_net(1);
    torch::optim::SGD ref_sgd(ref->parameters(), torch::optim::SGDOptions(0.05));
    auto [x0, y0] = global_batch(0, 8);
    auto [x1, y1] = global_batch(1, 8);
    (summed_loss(*ref, x0, y0) / 16).backward();
    (summed_loss(*ref, x1, y1) / 16).backward();
    ref_sgd.step();
    auto want = flat_params(*ref);
    std::vector<std::vector<torch::Tensor>> got(2);
    dlrun::test::run_ranks(2, [&](dlrun::Context& ctx) {
      auto net = make_net(1);
      dlrun::DataParallel dp(net, ctx);
      torch::optim::SGD sgd(net->parameters(), torch::optim::SGDOptions(0.05));
      const int64_t b = ctx.rank() * 4;
      {
        auto guard = dp.no_sync();
        dp.backward(summed_loss(*net, x0.slice(0, b, b + 4), y0.slice(0, b, b + 4)) * 2 / 16);
      }
      // Between the two backward passes the ranks' gradients differ (nothing was reduced).
      dp.backward(summed_loss(*net, x1.slice(0, b, b + 4), y1.slice(0, b, b + 4)) * 2 / 16);
      dp.step(sgd);
      got[ctx.rank()] = flat_params(*net);
    });
    check_close(got[0], want);
    check_close(got[1], want);
  }

  TEST_CASE("a step whose last backward ran inside no_sync is refused: the replicas would drift apart") {
    std::atomic<int> refused{0};
    std::vector<std::vector<torch::Tensor>> got(2);
    dlrun::test::run_ranks(2, [&](dlrun::Context& ctx) {
      auto net = make_net(1);
      dlrun::DataParallel dp(net, ctx);
      torch::optim::SGD sgd(net->parameters(), torch::optim::SGDOptions(0.05));
      auto [x, y] = global_batch(0, 8);
      const int64_t b = ctx.rank() * 4;
      {
        auto guard = dp.no_sync();
        dp.backward(summed_loss(*net, x.slice(0, b, b + 4), y.slice(0, b, b + 4)));
      }
      try {
        dp.step(sgd);
      } catch (const dlrun::ConfigError& e) {
        if (std::string(e.what()).find("the last backward() ran inside no_sync()") != std::string::npos) ++refused;
      }
      // A synced backward then reduces what was accumulated, and the step is taken.
      dp.backward(summed_loss(*net, x.slice(0, b, b + 4), y.slice(0, b, b + 4)));
      dp.step(sgd);
      got[ctx.rank()] = flat_params(*net);
    });
    CHECK(refused == 2);
    check_close(got[0], got[1]);
  }

  TEST_CASE("a step after loss.backward() alone is refused: nothing was averaged") {
    std::atomic<int> refused{0};
    std::vector<std::vector<torch::Tensor>> got(2);
    dlrun::test::run_ranks(2, [&](dlrun::Context& ctx) {
      auto net = make_net(1);
      dlrun::DataParallel dp(net, ctx);
      torch::optim::SGD sgd(net->parameters(), torch::optim::SGDOptions(0.05));
      auto [x, y] = global_batch(0, 8);
      const int64_t b = ctx.rank() * 4;
      summed_loss(*net, x.slice(0, b, b + 4), y.slice(0, b, b + 4)).backward();
      try {
        dp.step(sgd);
      } catch (const dlrun::ConfigError& e) {
        if (std::string(e.what()).find("call dp.backward(loss), not loss.backward()") != std::string::npos) ++refused;
      }
      sgd.zero_grad();
      dp.backward(summed_loss(*net, x.slice(0, b, b + 4), y.slice(0, b, b + 4)));
      dp.step(sgd);
      got[ctx.rank()] = flat_params(*net);
    });
    CHECK(refused == 2);
    check_close(got[0], got[1]);
  }

  TEST_CASE("ranks whose samplers disagree fail at the first step, every one, with no collective of the check's own") {
    // One rank's setting gone wrong, each way: the batch, the dataset, the seed, the position.
    struct Case {
      int64_t batch1, size1;
      uint64_t seed1;
      bool skip1;
      const char* words;
    };
    const Case cases[] = {{16, 64, 7, false, "their global batch sizes differ (rank 1: 16)"},
                          {8, 32, 7, false, "their dataset sizes differ (rank 1: 32)"},
                          {8, 64, 8, false, "their seeds differ (rank 1: 8)"},
                          {8, 64, 7, true, "they are at different samples (rank 1: epoch 0, sample 8 of it)"}};
    // Each rank's half of the first global batch, one step: what it threw, or empty.
    auto first_step = [](dlrun::Context& ctx, NetImpl& net, dlrun::DataParallel& dp, torch::optim::SGD& sgd) {
      auto [x, y] = global_batch(0, 8);
      const int64_t b = ctx.rank() * 4;
      dp.backward(summed_loss(net, x.slice(0, b, b + 4), y.slice(0, b, b + 4)));
      try {
        dp.step(sgd);
      } catch (const dlrun::ConfigError& e) {
        return std::string(e.what());
      }
      return std::string();
    };
    for (const auto& c : cases) {
      CAPTURE(c.words);
      std::vector<std::string> messages(2);
      std::atomic<int> steps{0};
      dlrun::test::run_ranks(2, [&](dlrun::Context& ctx) {
        auto net = make_net(1);
        dlrun::DataParallel dp(net, ctx);
        torch::optim::SGD sgd(net->parameters(), torch::optim::SGDOptions(0.05));
        const bool one = ctx.rank() == 1;
        dlrun::ElasticSampler sampler(one ? c.size1 : 64, ctx, one ? c.seed1 : 7);
        if (one && c.skip1) sampler.next(8);
        sampler.next(one ? c.batch1 : 8);
        messages[static_cast<size_t>(ctx.rank())] = first_step(ctx, *net, dp, sgd);
        if (messages[static_cast<size_t>(ctx.rank())].empty()) ++steps;
      });
      CHECK(steps == 0);
      CHECK(messages[0].find("the ranks' ElasticSamplers disagree at the first step") == 0);
      CHECK(messages[1].find(c.words) != std::string::npos);
    }
    // Ranks at different steps (one restored another checkpoint): one measures the gradient
    // norms at its step, the other not. The votes must still have one length, or the check
    // would hang or read another rank's slots.
    std::vector<std::string> said(2);
    dlrun::test::run_ranks(2, [&](dlrun::Context& ctx) {
      auto net = make_net(1);
      dlrun::DataParallel dp(net, ctx);
      std::vector<at::Tensor> params;
      for (const auto& p : net->parameters()) params.push_back(p);
      dp.track_gradient_norms({params});
      dp.measure_gradient_norms(ctx.rank() == 0);
      torch::optim::SGD sgd(net->parameters(), torch::optim::SGDOptions(0.05));
      dlrun::ElasticSampler sampler(64, ctx, 7);
      if (ctx.rank() == 1) sampler.next(8);
      sampler.next(8);
      said[static_cast<size_t>(ctx.rank())] = first_step(ctx, *net, dp, sgd);
    });
    CHECK(said[0].find("they are at different samples (rank 0: epoch 0, sample 0 of it)") != std::string::npos);
    CHECK(said[1].find("they are at different samples (rank 1: epoch 0, sample 8 of it)") != std::string::npos);
    // The same on every rank: the steps are taken, and later steps carry no check.
    std::atomic<int> steps{0};
    dlrun::test::run_ranks(2, [&](dlrun::Context& ctx) {
      auto net = make_net(1);
      dlrun::DataParallel dp(net, ctx);
      torch::optim::SGD sgd(net->parameters(), torch::optim::SGDOptions(0.05));
      dlrun::ElasticSampler sampler(64, ctx, 7);
      for (int step = 0; step < 3; ++step) {
        sampler.next(8);
        auto [x, y] = global_batch(step, 8);
        const int64_t b = ctx.rank() * 4;
        dp.backward(summed_loss(*net, x.slice(0, b, b + 4), y.slice(0, b, b + 4)));
        dp.step(sgd);
        ++steps;
      }
    });
    CHECK(steps == 6);
  }

  TEST_CASE("a stop asked on one rank is seen by all ranks after the same step") {
    at::set_num_threads(1);
    std::vector<int> stopped_at(3, -1);
    std::vector<int> codes(3, -1);
    dlrun::test::run_ranks(3, [&](dlrun::Context& ctx) {
      auto net = make_net(1);
      dlrun::DataParallel dp(net, ctx);
      torch::optim::SGD sgd(net->parameters(), torch::optim::SGDOptions(0.05));
      for (int s = 0; s < 10; ++s) {
        if (ctx.rank() == 2 && s == 3) ctx.request_stop();
        auto [x, y] = global_batch(s, 6);
        sgd.zero_grad();
        dp.backward(summed_loss(*net, x.slice(0, 2 * ctx.rank(), 2 * ctx.rank() + 2),
                                y.slice(0, 2 * ctx.rank(), 2 * ctx.rank() + 2)));
        dp.step(sgd);
        if (ctx.stop_requested()) {
          stopped_at[ctx.rank()] = s;
          codes[ctx.rank()] = ctx.exit_code();
          return;
        }
      }
    });
    CHECK(stopped_at == std::vector<int>{3, 3, 3});
    CHECK(codes == std::vector<int>{75, 75, 75});
  }

  TEST_CASE("tracked groups: the mean of each rank's local gradient norm travels with the vote") {
    at::set_num_threads(1);
    const int world = 3;
    auto [x, y] = global_batch(0, 12);
    // What each rank's own gradient is, computed here in one process.
    std::vector<double> want_a(1, 0.0), want_rest(1, 0.0);
    for (int r = 0; r < world; ++r) {
      auto net = make_net(1);
      auto [begin, end] = dlrun::ElasticSampler::share(12, r, world);
      (summed_loss(*net, x.slice(0, begin, end), y.slice(0, begin, end)) * world / 12).backward();
      for (const auto& item : net->named_parameters()) {
        double sqr = item.value().grad().pow(2).sum().item<double>();
        (item.key().rfind("a.", 0) == 0 ? want_a : want_rest)[0] += sqr / world;
      }
    }
    for (bool shm : {true, false}) {
      CAPTURE(shm);
      dlrun::InitOptions init;
      init.shared_memory_allreduce = shm;
      std::vector<std::vector<double>> got(world);
      dlrun::test::run_ranks(
          world,
          [&](dlrun::Context& ctx) {
            auto net = make_net(1);
            dlrun::DataParallelOptions options;
            options.first_bucket_cap_bytes = 100;  // groups spread over several buckets
            options.bucket_cap_bytes = 300;
            dlrun::DataParallel dp(net, ctx, options);
            std::vector<torch::Tensor> group_a, rest;
            for (const auto& item : net->named_parameters())
              (item.key().rfind("a.", 0) == 0 ? group_a : rest).push_back(item.value());
            dp.track_gradient_norms({group_a, rest});
            auto [begin, end] = dlrun::ElasticSampler::share(12, ctx.rank(), world);
            dp.backward(summed_loss(*net, x.slice(0, begin, end), y.slice(0, begin, end)) * world /
                        12);
            dp.synchronize();
            dp.synchronize();  // idempotent
            got[ctx.rank()] = dp.local_gradient_sqr_norms();
          },
          init);
      for (int r = 0; r < world; ++r) {
        CAPTURE(r);
        REQUIRE(got[r].size() == 2);
        CHECK(got[r][0] == doctest::Approx(want_a[0]).epsilon(1e-5));
        CHECK(got[r][1] == doctest::Approx(want_rest[0]).epsilon(1e-5));
      }
    }
    CHECK(want_a[0] > 0);
  }
}
