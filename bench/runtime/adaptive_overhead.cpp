// What dlrun::AdaptiveBatch costs per step when it cannot change the batch (max_batch =
// initial_batch): the same model trained side by side in one process, as a plain DataParallel
// + Adam step and as AdaptiveBatch steps measuring the noise scale every step and every
// `measure_every` steps, in alternating blocks (so the machine's drift hits every arm alike).
// Rank 0 prints each arm's step time (the median of its blocks' mean steps: the measured steps
// and the steps between count as they come) and its cost against the plain arm: the median,
// with quartiles, of the ratios of each block to the plain block of the same round (adjacent in
// time, so slow drifts of the machine cancel), and the ratio of the arms' total times.
//
//   dlrun local --nproc 2 adaptive_overhead MODEL [BLOCKS] [STEPS_PER_BLOCK] [MEASURE_EVERY...]
//
// MODEL: small (examples/fashion_mnist's MLP, 784-256-10) or cnn (its CNN); 32 samples per rank,
// as the example's default global batch of 64 on 2 ranks. See bench/adaptive_overhead.sh.
// A MEASURE_EVERY of 0 adds a second plain arm (an A/A control: what the method reads between
// two identical arms). Environment: REPLAN_EVERY sets the adaptive arms' replan_every;
// NO_NOISE_FLOOR turns their loss bookkeeping off (noise_floor = false).

#include <ATen/Parallel.h>
#include <torch/nn/functional/loss.h>
#include <torch/optim/adam.h>
#include <torch/utils.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "cnn.hpp"
#include "dlrun/runtime.hpp"
#include "mlp.hpp"

namespace F = torch::nn::functional;

namespace {

constexpr int64_t k_per_rank = 32;

// One arm: its own model, DataParallel, Adam and (unless plain) AdaptiveBatch.
struct Arm {
  std::string name;
  std::shared_ptr<torch::nn::Module> module;
  std::function<torch::Tensor(torch::Tensor)> forward;
  std::unique_ptr<dlrun::DataParallel> dp;
  std::unique_ptr<torch::optim::Adam> adam;
  std::unique_ptr<dlrun::AdaptiveBatch> adaptive;
  std::vector<double> block_means;  // ms per step
};

std::unique_ptr<Arm> make_arm(const std::string& model, dlrun::Context& ctx, int measure_every) {
  auto arm = std::make_unique<Arm>();
  torch::manual_seed(0);
  if (model == "cnn") {
    auto m = std::make_shared<fashion_mnist::Cnn>();
    arm->module = m;
    arm->forward = [m](torch::Tensor x) { return m->forward(x); };
  } else {
    auto m = std::make_shared<fashion_mnist::Mlp>();
    arm->module = m;
    arm->forward = [m](torch::Tensor x) { return m->forward(x); };
  }
  arm->dp = std::make_unique<dlrun::DataParallel>(arm->module, ctx);
  arm->adam = std::make_unique<torch::optim::Adam>(arm->module->parameters(),
                                                   torch::optim::AdamOptions(2e-3));
  arm->name = "plain";
  if (measure_every > 0) {
    dlrun::AdaptiveBatchOptions o;
    o.initial_batch = o.max_batch = k_per_rank * ctx.world_size();
    o.measure_every = measure_every;
    o.log_every = 0;  // as a plain run writes no metrics
    if (const char* every = std::getenv("REPLAN_EVERY")) o.replan_every = std::atoll(every);
    if (std::getenv("NO_NOISE_FLOOR")) o.noise_floor = false;  // the loss's bookkeeping off
    arm->adaptive = std::make_unique<dlrun::AdaptiveBatch>(ctx, *arm->dp, *arm->adam, o);
    arm->name = "adaptive, noise scale every " + std::to_string(measure_every) + " step(s)";
  }
  return arm;
}

void step(Arm& arm, const torch::Tensor& x, const torch::Tensor& y) {
  auto loss = F::cross_entropy(arm.forward(x), y);
  if (arm.adaptive) {
    arm.adaptive->backward(loss, true);
    arm.adaptive->step();
  } else {
    arm.dp->backward(loss);
    arm.dp->step(*arm.adam);
  }
  arm.adam->zero_grad();
}

}  // namespace

int main(int argc, char** argv) {
  const std::string model = argc > 1 ? argv[1] : "small";
  const int blocks = argc > 2 ? std::atoi(argv[2]) : 20;
  const int per_block = argc > 3 ? std::atoi(argv[3]) : 50;
  std::vector<int> cadences;
  for (int i = 4; i < argc; ++i) cadences.push_back(std::atoi(argv[i]));
  if (cadences.empty()) cadences = {1, 4};
  try {
    auto ctx = dlrun::init();
    if (const char* threads = std::getenv("OMP_NUM_THREADS"))
      at::set_num_threads(std::atoi(threads));
    std::vector<std::unique_ptr<Arm>> arms;
    arms.push_back(make_arm(model, ctx, 0));
    for (int every : cadences) arms.push_back(make_arm(model, ctx, every));
    torch::manual_seed(static_cast<uint64_t>(1 + ctx.rank()));
    auto x = torch::randn({k_per_rank, 1, 28, 28});
    auto y = torch::randint(0, 10, {k_per_rank});
    for (auto& arm : arms) {
      for (int i = 0; i < 120; ++i)
        step(*arm, x, y);  // warm-up, past the 100 steps AdaptiveBatch measures all
    }
    for (int b = 0; b < blocks; ++b) {
      for (size_t k = 0; k < arms.size();
           ++k) {  // each block starts with the next arm: no arm always follows another
        auto& arm = arms[(b + k) % arms.size()];
        auto start = std::chrono::steady_clock::now();
        for (int i = 0; i < per_block; ++i) step(*arm, x, y);
        arm->block_means.push_back(
            std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - start)
                .count() /
            per_block);
      }
    }
    ctx.barrier();
    if (ctx.is_main()) {
      // Each block of an arm is compared with the plain block of the same round (adjacent in
      // time, so the machine's drift cancels): the median of those ratios, with its quartiles.
      const auto& plain = arms.front()->block_means;
      for (auto& arm : arms) {
        std::vector<double> t = arm->block_means, ratios;
        double total = 0, plain_total = 0;
        for (size_t b = 0; b < t.size(); ++b) {
          ratios.push_back(t[b] / plain[b]);
          total += t[b];
          plain_total += plain[b];
        }
        std::sort(t.begin(), t.end());
        std::sort(ratios.begin(), ratios.end());
        auto at = [](const std::vector<double>& v, double q) {
          return v[static_cast<size_t>(q * (v.size() - 1))];
        };
        std::printf(
            "%s ranks=%d %s: step_ms=%.3f (x%.3f of plain, quartiles %.3f-%.3f; all blocks "
            "x%.3f)%s\n",
            model.c_str(), ctx.world_size(), arm->name.c_str(), at(t, 0.5), at(ratios, 0.5),
            at(ratios, 0.25), at(ratios, 0.75), total / plain_total,
            arm->adaptive
                ? (", measured every " + std::to_string(arm->adaptive->stats().measure_every) +
                   " steps at the end")
                      .c_str()
                : "");
      }
    }
    return 0;
  } catch (const dlrun::Error& e) {
    std::fprintf(stderr, "adaptive_overhead: error: %s\n", e.what());
    return e.exit_code();
  }
}
