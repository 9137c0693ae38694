// Fashion-MNIST with a small CNN, data-parallel on dlrun's runtime, resumable at any step:
//
//   dlrun local --nproc 2 ./fashion_mnist --epochs 3
//
// Stop it with Ctrl-C (or SIGTERM/SIGUSR1 to any rank): all ranks finish the same step, rank 0
// checkpoints, and they exit with 75. Start it again, with any --nproc, to continue exactly
// where it stopped. The last line rank 0 prints is `test_accuracy=0.XXXX`.

#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <thread>

#include <ATen/Parallel.h>
#include <CLI/CLI.hpp>
#include <fmt/format.h>
#include <torch/nn/functional/loss.h>
#include <torch/nn/module.h>
#include <torch/nn/modules/conv.h>
#include <torch/nn/modules/linear.h>
#include <torch/nn/functional/activation.h>
#include <torch/nn/functional/pooling.h>
#include <torch/optim/adam.h>
#include <torch/utils.h>

#include "dlrun/protocol.hpp"
#include "dlrun/runtime.hpp"
#include "fashion_mnist_data.hpp"
#include "progress.hpp"
#include "trace.hpp"

namespace F = torch::nn::functional;

namespace {

struct Options {
  int64_t epochs = 3;
  int64_t batch_size = 64;  // global, over all ranks
  int64_t train_limit = 0;
  std::string checkpoint_dir;
  double lr = 2e-3;
  uint64_t seed = 1;
  std::string data_dir = DLRUN_FASHION_MNIST_DIR;
  std::string trace_dir;
  int64_t checkpoint_every = 0;
  int slow_ms = 0;
};

struct NetImpl : torch::nn::Module {
  torch::nn::Conv2d conv1{nullptr}, conv2{nullptr};
  torch::nn::Linear fc1{nullptr}, fc2{nullptr};
  NetImpl() {
    conv1 = register_module("conv1", torch::nn::Conv2d(torch::nn::Conv2dOptions(1, 16, 3).padding(1)));
    conv2 = register_module("conv2", torch::nn::Conv2d(torch::nn::Conv2dOptions(16, 32, 3).padding(1)));
    fc1 = register_module("fc1", torch::nn::Linear(32 * 7 * 7, 128));
    fc2 = register_module("fc2", torch::nn::Linear(128, 10));
  }
  torch::Tensor forward(torch::Tensor x) {
    x = F::max_pool2d(F::relu(conv1->forward(x)), F::MaxPool2dFuncOptions(2));
    x = F::max_pool2d(F::relu(conv2->forward(x)), F::MaxPool2dFuncOptions(2));
    x = F::relu(fc1->forward(x.flatten(1)));
    return fc2->forward(x);
  }
};

double test_accuracy(NetImpl& net, const fashion_mnist::Split& test, dlrun::Context& ctx) {
  torch::NoGradGuard no_grad;
  net.eval();
  auto [begin, end] = dlrun::ElasticSampler::share(test.size(), ctx.rank(), ctx.world_size());
  double correct = 0;
  for (int64_t i = begin; i < end; i += 1000) {
    int64_t j = std::min(end, i + 1000);
    auto predicted = net.forward(test.images.slice(0, i, j)).argmax(1);
    correct += predicted.eq(test.labels.slice(0, i, j)).sum().item<double>();
  }
  std::vector<double> totals{correct, static_cast<double>(end - begin)};
  ctx.all_reduce_sum(totals);
  net.train();
  return totals[1] > 0 ? totals[0] / totals[1] : 0.0;
}

// All ranks must end with the same weights; a cheap check that gradients were reduced.
void check_replicas_agree(NetImpl& net, dlrun::Context& ctx) {
  double sum = 0;
  for (const auto& p : net.parameters()) sum += p.detach().abs().sum().item<double>();
  std::vector<double> sums{sum, sum * sum};
  ctx.all_reduce_sum(sums);
  const double mean = sums[0] / ctx.world_size();
  if (std::abs(sum - mean) > 1e-6 * std::abs(mean)) {
    throw std::runtime_error(fmt::format("rank {}: weights differ from the other ranks' "
                                         "(|w| sum {} vs mean {})", ctx.rank(), sum, mean));
  }
}

int train(const Options& options) {
  auto ctx = dlrun::init();
  if (const char* threads = std::getenv(dlrun::env::k_omp_num_threads)) {
    at::set_num_threads(std::max(1, std::atoi(threads)));
  }
  auto train_set = fashion_mnist::load(options.data_dir, "train", options.train_limit);
  auto test_set = fashion_mnist::load(options.data_dir, "t10k");

  torch::manual_seed(options.seed);
  auto net = std::make_shared<NetImpl>();
  dlrun::DataParallel dp(net, ctx);
  torch::optim::Adam adam(net->parameters(), torch::optim::AdamOptions(options.lr));
  dlrun::ElasticSampler sampler(train_set.size(), ctx, options.seed);

  std::string checkpoint_dir = options.checkpoint_dir;
  if (checkpoint_dir.empty() && !ctx.run_dir().empty()) checkpoint_dir = ctx.run_dir() + "/checkpoints";
  std::optional<dlrun::Checkpoint> ckpt;
  int64_t step = 0;
  double loss_avg = 0;
  if (!checkpoint_dir.empty()) {
    ckpt.emplace(ctx, checkpoint_dir);
    ckpt->track("model", net);
    ckpt->track("adam", adam);
    ckpt->track(sampler);
    if (auto info = ckpt->restore()) {
      step = info->step;
      loss_avg = info->values.count("loss") ? info->values.at("loss") : 0.0;
      if (ctx.is_main()) {
        fmt::print("resumed from step {} (epoch {}, sample {} of {}, loss {:.4f}) saved by {} "
                   "rank(s); now {} rank(s)\n",
                   step, sampler.epoch() + 1, sampler.position(), sampler.dataset_size(), loss_avg,
                   info->saved_world_size, ctx.world_size());
      }
    }
  }
  auto save = [&] {
    if (ckpt) ckpt->save(step, {{"loss", loss_avg}});
  };

  fashion_mnist::Trace trace(options.trace_dir, ctx.rank());
  fashion_mnist::Progress progress(ctx.is_main());
  auto epoch_start = std::chrono::steady_clock::now();
  int64_t epoch_samples = 0;
  std::optional<double> accuracy;  // of the weights as they are now
  while (sampler.epoch() < options.epochs) {
    auto batch = sampler.next(options.batch_size);
    if (!batch) {
      progress.finish_epoch();
      double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - epoch_start).count();
      accuracy = test_accuracy(*net, test_set, ctx);
      if (ctx.is_main()) {
        fmt::print("epoch {}/{}: loss {:.4f}, test accuracy {:.4f}, {:.1f} s, {:.0f} samples/s\n",
                   sampler.epoch() + 1, options.epochs, loss_avg, *accuracy, seconds,
                   epoch_samples / std::max(seconds, 1e-9));
        std::fflush(stdout);
      }
      sampler.next_epoch();
      save();
      epoch_start = std::chrono::steady_clock::now();
      epoch_samples = 0;
      continue;
    }
    auto index = torch::tensor(batch->indices, torch::kLong);
    auto images = train_set.images.index_select(0, index);
    auto labels = train_set.labels.index_select(0, index);
    auto loss = F::cross_entropy(net->forward(images), labels,
                                 F::CrossEntropyFuncOptions().reduction(torch::kSum)) *
                batch->loss_scale(ctx.world_size());
    accuracy.reset();
    dp.backward(loss);
    dp.step(adam);
    adam.zero_grad();
    ++step;
    epoch_samples += batch->global_size;
    // Scaled by world_size / global batch, this rank's summed loss is its share's mean: a
    // noisy estimate of the global batch's mean loss (no extra allreduce for a log line).
    double step_loss = loss.item<double>();
    loss_avg = step == 1 ? step_loss : 0.95 * loss_avg + 0.05 * step_loss;
    trace.samples(step, batch->epoch, batch->indices);
    trace.loss(step, loss_avg, step_loss);
    progress.update(sampler.epoch(), options.epochs, sampler.position(), sampler.dataset_size(), loss_avg);
    if (ctx.stop_requested()) {
      progress.finish_epoch();
      save();
      if (ctx.is_main()) {
        fmt::print("stopped after step {} (epoch {}, sample {} of {}): checkpoint saved, exit {}\n",
                   step, sampler.epoch() + 1, sampler.position(), sampler.dataset_size(),
                   ctx.exit_code());
      }
      return ctx.exit_code();
    }
    if (options.checkpoint_every > 0 && step % options.checkpoint_every == 0) save();
    if (options.slow_ms > 0) std::this_thread::sleep_for(std::chrono::milliseconds(options.slow_ms));
  }
  check_replicas_agree(*net, ctx);
  if (!accuracy) accuracy = test_accuracy(*net, test_set, ctx);
  if (ctx.is_main()) fmt::print("test_accuracy={:.4f}\n", *accuracy);
  return dlrun::exit_code::k_success;
}

}  // namespace

int main(int argc, char** argv) {
  Options options;
  CLI::App app{"Fashion-MNIST on dlrun's runtime (run it with `dlrun local --nproc N`)"};
  app.add_option("--epochs", options.epochs, "Epochs to train")->check(CLI::PositiveNumber);
  app.add_option("--batch-size", options.batch_size, "Global batch size (over all ranks)")
      ->check(CLI::PositiveNumber);
  app.add_option("--train-limit", options.train_limit, "Train on the first N images only (0: all)");
  app.add_option("--checkpoint-dir", options.checkpoint_dir,
                 "Checkpoint directory (default: $DLRUN_RUN_DIR/checkpoints; none without dlrun)");
  app.add_option("--checkpoint-every", options.checkpoint_every, "Also checkpoint every N steps");
  app.add_option("--lr", options.lr, "Adam learning rate");
  app.add_option("--seed", options.seed, "Seed of the weights and of the sample order");
  app.add_option("--data-dir", options.data_dir, "Directory of the Fashion-MNIST .gz files");
  app.add_option("--trace-dir", options.trace_dir,
                 "Append the samples each rank trains on and the loss here (for tests)");
  app.add_option("--slow-ms", options.slow_ms, "Sleep this long after each step (for tests)");
  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    return app.exit(e) == 0 ? 0 : dlrun::exit_code::k_usage;
  }
  try {
    return train(options);
  } catch (const dlrun::Error& e) {
    std::fprintf(stderr, "fashion_mnist: error: %s\n", e.what());
    return e.exit_code();
  } catch (const std::exception& e) {
    std::fprintf(stderr, "fashion_mnist: error: %s\n", e.what());
    return 1;
  }
}
