// A data-parallel training program on dlrun's runtime: a small regression model on
// synthetic data, trained on every rank with averaged gradients, stoppable and resumable
// at any step with any number of ranks.
//
//   dlrun local --nproc 2 build/train            train on 2 CPU ranks
//   dlrun local --nproc 2:4 build/train          elastic: `dlrun resize JOB 3` while it runs
//
// Replace the data and the model with yours; keep the shape of the loop.

#include <cstdio>
#include <memory>

#include <torch/nn/functional/loss.h>
#include <torch/nn/module.h>
#include <torch/nn/modules/linear.h>
#include <torch/optim/sgd.h>
#include <torch/utils.h>

#include "dlrun/runtime.hpp"

namespace {

constexpr int64_t k_samples = 4096;
constexpr int64_t k_features = 16;
constexpr int64_t k_batch = 128;  // global: shared by all ranks
constexpr int64_t k_epochs = 5;

struct ModelImpl : torch::nn::Module {
  torch::nn::Linear hidden{nullptr}, out{nullptr};
  ModelImpl() {
    hidden = register_module("hidden", torch::nn::Linear(k_features, 32));
    out = register_module("out", torch::nn::Linear(32, 1));
  }
  torch::Tensor forward(const torch::Tensor& x) { return out->forward(torch::relu(hidden->forward(x))); }
};

}  // namespace

int main() {
  // dlrun reads the ranks' output through pipes: a line at a time, so that `dlrun logs -f`
  // and the terminal show it as it is printed.
  std::setvbuf(stdout, nullptr, _IOLBF, 0);
  try {
    auto ctx = dlrun::init();  // from dlrun's environment; a world of 1 when run alone

    // Where this rank trains: its GPU under dlrun local --gpus N, else the CPU.
    const torch::Device device = ctx.device();

    // The same synthetic data on every rank: y = x · w + noise.
    torch::manual_seed(0);
    auto x = torch::randn({k_samples, k_features});
    auto y = x.matmul(torch::randn({k_features, 1})) + 0.1 * torch::randn({k_samples, 1});
    x = x.to(device);
    y = y.to(device);

    torch::manual_seed(1);
    auto model = std::make_shared<ModelImpl>();
    model->to(device);
    dlrun::DataParallel dp(model, ctx);  // rank 0's weights everywhere; gradients averaged
    torch::optim::SGD sgd(model->parameters(), torch::optim::SGDOptions(0.05));
    dlrun::ElasticSampler sampler(k_samples, ctx, /*seed=*/42);

    // Checkpoints where dlrun keeps the job's (job.toml's checkpoint_dir, else the run
    // directory; none when run alone).
    std::unique_ptr<dlrun::Checkpoint> ckpt;
    int64_t step = 0;
    double loss_value = 0;
    if (!ctx.checkpoint_dir().empty()) {
      ckpt = std::make_unique<dlrun::Checkpoint>(ctx, ctx.checkpoint_dir());
      ckpt->track("model", model);
      ckpt->track("sgd", sgd);
      ckpt->track(sampler);
      if (auto info = ckpt->restore()) {
        step = info->step;
        if (info->values.count("loss")) loss_value = info->values.at("loss");
        if (ctx.is_main()) {
          std::printf("resumed from step %lld (epoch %lld), saved by %d rank(s); now %d rank(s)\n",
                      static_cast<long long>(step), static_cast<long long>(sampler.epoch() + 1),
                      info->saved_world_size, ctx.world_size());
        }
      }
    }

    while (sampler.epoch() < k_epochs) {
      auto batch = sampler.next(k_batch);
      if (!batch) {  // end of the epoch
        if (ctx.is_main()) std::printf("epoch %lld: loss %.4f\n", static_cast<long long>(sampler.epoch() + 1), loss_value);
        sampler.next_epoch();
        if (ckpt) ckpt->save(step, {{"loss", loss_value}});  // a failure or a restart resumes from here
        continue;
      }
      auto index = torch::tensor(batch->indices, torch::kLong).to(device);
      auto prediction = model->forward(x.index_select(0, index));
      auto loss = torch::nn::functional::mse_loss(
                      prediction, y.index_select(0, index),
                      torch::nn::functional::MSELossFuncOptions().reduction(torch::kSum)) *
                  batch->loss_scale(ctx.world_size());
      dp.backward(loss);
      dp.step(sgd);
      sgd.zero_grad();
      ++step;
      loss_value = loss.item<double>();
      if (ctx.stop_requested()) {  // Ctrl-C, a resize, a stop request: all ranks agree on this step
        if (ckpt) ckpt->save(step, {{"loss", loss_value}});
        // 75: "resume me from the checkpoint". dlrun restarts the ranks for a resize; after
        // Ctrl-C it prints the command that resumes the job (dlrun local --resume N).
        return ctx.exit_code();
      }
    }
    if (ctx.is_main()) std::printf("final_loss=%.4f\n", loss_value);
    return 0;
  } catch (const dlrun::Error& e) {  // the runtime's errors carry dlrun's exit codes
    std::fprintf(stderr, "train: error: %s\n", e.what());
    return e.exit_code();
  } catch (const std::exception& e) {
    std::fprintf(stderr, "train: error: %s\n", e.what());
    return 1;
  }
}
