// One training step (forward, backward with gradient allreduce, SGD step) of a fixed model
// on random data, timed: the median over --steps after --warmup. Rank 0 prints
// `dlrun <model> ranks=<n> step_ms=<median>`. bench/runtime/ddp_step.py is the same in
// PyTorch DDP. See bench/runtime.sh.

#include <ATen/Parallel.h>
#include <torch/nn/functional/activation.h>
#include <torch/nn/functional/loss.h>
#include <torch/nn/functional/pooling.h>
#include <torch/nn/module.h>
#include <torch/nn/modules/activation.h>
#include <torch/nn/modules/container/sequential.h>
#include <torch/nn/modules/conv.h>
#include <torch/nn/modules/linear.h>
#include <torch/optim/sgd.h>
#include <torch/utils.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <functional>
#include <string>
#include <vector>

#include "cnn.hpp"
#include "mlp.hpp"
#include "dlrun/runtime.hpp"

namespace F = torch::nn::functional;

using Cnn = fashion_mnist::Cnn;

struct Mlp : torch::nn::Module {
  torch::nn::Sequential layers;
  Mlp() {
    layers = register_module("layers",
                             torch::nn::Sequential(torch::nn::Linear(784, 2048), torch::nn::ReLU(),
                                                   torch::nn::Linear(2048, 2048), torch::nn::ReLU(),
                                                   torch::nn::Linear(2048, 2048), torch::nn::ReLU(),
                                                   torch::nn::Linear(2048, 10)));
  }
  torch::Tensor forward(torch::Tensor x) { return layers->forward(x.flatten(1)); }
};

// The per-step-overhead case of issue 3: examples/fashion_mnist's MLP, 784-256-10, 32 samples per rank.
using Small = fashion_mnist::Mlp;

int main(int argc, char** argv) {
  std::string model_name = argc > 1 ? argv[1] : "mlp";
  int steps = argc > 2 ? std::atoi(argv[2]) : 30;
  int warmup = 5;
  const bool no_sync = argc > 3 && std::string(argv[3]) == "nosync";  // no allreduce: the overlap's bound
  int64_t batch = model_name == "small" ? 32 : 64;  // per rank
  try {
    auto ctx = dlrun::init();
    if (const char* threads = std::getenv("OMP_NUM_THREADS"))
      at::set_num_threads(std::atoi(threads));
    torch::manual_seed(0);
    std::shared_ptr<torch::nn::Module> module;
    std::function<torch::Tensor(torch::Tensor)> forward;
    if (model_name == "small") {
      auto m = std::make_shared<Small>();
      module = m;
      forward = [m](torch::Tensor x) { return m->forward(x); };
    } else if (model_name == "cnn") {
      auto m = std::make_shared<Cnn>();
      module = m;
      forward = [m](torch::Tensor x) { return m->forward(x); };
    } else {
      auto m = std::make_shared<Mlp>();
      module = m;
      forward = [m](torch::Tensor x) { return m->forward(x); };
    }
    dlrun::DataParallel dp(module, ctx);
    torch::optim::SGD sgd(module->parameters(), torch::optim::SGDOptions(0.01));
    auto x = torch::randn({batch, 1, 28, 28});
    auto y = torch::randint(0, 10, {batch});
    std::vector<double> times;
    for (int i = 0; i < warmup + steps; ++i) {
      auto start = std::chrono::steady_clock::now();
      sgd.zero_grad();
      if (no_sync) {
        auto guard = dp.no_sync();
        dp.backward(F::cross_entropy(forward(x), y));
      } else {
        dp.backward(F::cross_entropy(forward(x), y));
      }
      dp.step(sgd);
      double ms =
          std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - start)
              .count();
      if (i >= warmup) times.push_back(ms);
    }
    ctx.barrier();
    std::sort(times.begin(), times.end());
    if (ctx.is_main()) {
      std::printf("dlrun%s %s ranks=%d buckets=%zu step_ms=%.2f\n", no_sync ? " (no sync)" : "", model_name.c_str(),
                  ctx.world_size(), dp.bucket_count(), times[times.size() / 2]);
    }
    return 0;
  } catch (const dlrun::Error& e) {
    std::fprintf(stderr, "runtime_step: error: %s\n", e.what());
    return e.exit_code();
  }
}
