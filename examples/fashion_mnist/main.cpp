// Fashion-MNIST with a small CNN, data-parallel on dlrun's runtime, resumable at any step:
//
//   dlrun local --nproc 2 ./fashion_mnist --epochs 3
//
// Stop it with Ctrl-C (or SIGTERM/SIGUSR1 to any rank): all ranks finish the same step, rank 0
// checkpoints, and they exit with 75. Start it again, with any --nproc, to continue exactly
// where it stopped. The last line rank 0 prints is `test_accuracy=0.XXXX`.
//
//   dlrun local --nproc 2 ./fashion_mnist --adaptive --max-batch-size 4096
//
// lets dlrun::AdaptiveBatch choose the batch size (goodput) and scale the learning rate.
// --target-accuracy A stops as soon as the test accuracy, measured every --eval-every samples,
// reaches A, and prints the training time it took (bench/adaptive.py uses it).
//
//   dlrun local --gpus 2 ./fashion_mnist
//
// trains on the GPUs (NCCL): each rank puts the model and the data set on ctx.device().

#include <ATen/Parallel.h>
#include <fmt/format.h>
#include <torch/nn/functional/activation.h>
#include <torch/nn/functional/loss.h>
#include <torch/nn/functional/pooling.h>
#include <torch/nn/module.h>
#include <torch/nn/modules/conv.h>
#include <torch/nn/modules/linear.h>
#include <torch/optim/adam.h>
#include <torch/optim/sgd.h>
#include <torch/utils.h>
#include <unistd.h>

#include <CLI/CLI.hpp>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <thread>

#include "cnn.hpp"
#include "mlp.hpp"
#include "dlrun/protocol.hpp"
#include "dlrun/runtime.hpp"
#include "cli_options.hpp"
#include "fashion_mnist_data.hpp"
#include "progress.hpp"
#include "replica_check.hpp"
#include "run_report.hpp"
#include "step_cost.hpp"
#include "step_gate.hpp"
#include "trace.hpp"

namespace F = torch::nn::functional;

namespace {

struct Options {
  int64_t epochs = 3;
  int64_t batch_size = 64;  // global, over all ranks
  int64_t train_limit = 0;
  std::string checkpoint_dir;
  std::string optimizer = "adam";
  double lr = 0;          // 0: the optimizer's default (k_adam_lr, k_sgd_lr)
  double momentum = 0.9;  // SGD's
  uint64_t seed = 1;
  std::string data_dir = DLRUN_FASHION_MNIST_DIR;
  std::string trace_dir;
  int64_t checkpoint_every = 0;
  int slow_ms = 0;
  std::string step_gate;
  bool adaptive = false;
  int64_t max_batch_size = 4096;
  int64_t max_micro_batch = 0;
  int64_t replan_every = 0;
  bool noise_floor = true;
  std::string scaling_rule = "auto";
  double target_accuracy = 0;
  double target_test_loss = 0;
  int64_t eval_every = 10000;
  std::string device = "auto";
  std::string model = "cnn";
  int64_t measure_every = 4;
  double smoothing = 0.999;
  examples::StepCost cost;  // slept on top of the real compute (none by default)
};

// The learning rates at batch 64 that train the models well (docs/benchmarks.md's sweeps).
constexpr double k_adam_lr = 2e-3;
constexpr double k_sgd_lr = 0.02;

dlrun::InitOptions init_options(const Options& options) {
  dlrun::InitOptions init;
  if (options.device == "cpu") init.device = dlrun::DeviceKind::cpu;
  if (options.device == "cuda") init.device = dlrun::DeviceKind::cuda;
  return init;
}

fashion_mnist::Split on_device(fashion_mnist::Split split, const c10::Device& device) {
  if (device.is_cpu()) return split;
  return {split.images.to(device), split.labels.to(device)};
}

// The model --model names: the CNN (the default) or the small MLP.
struct NetImpl : torch::nn::Module {
  std::shared_ptr<fashion_mnist::Cnn> cnn;
  std::shared_ptr<fashion_mnist::Mlp> mlp;
  explicit NetImpl(const std::string& model) {
    if (model == "mlp") {
      mlp = register_module("mlp", std::make_shared<fashion_mnist::Mlp>());
    } else {
      cnn = register_module("cnn", std::make_shared<fashion_mnist::Cnn>());
    }
  }
  torch::Tensor forward(const torch::Tensor& x) { return mlp ? mlp->forward(x) : cnn->forward(x); }
};

// The test set's accuracy and mean cross-entropy, over all ranks (each takes its share).
struct TestResult {
  double accuracy = 0;
  double loss = 0;
};

TestResult evaluate(NetImpl& net, const fashion_mnist::Split& test, dlrun::Context& ctx) {
  torch::NoGradGuard no_grad;
  net.eval();
  auto [begin, end] = dlrun::ElasticSampler::share(test.size(), ctx.rank(), ctx.world_size());
  double correct = 0, loss = 0;
  for (int64_t i = begin; i < end; i += 1000) {
    int64_t j = std::min(end, i + 1000);
    auto logits = net.forward(test.images.slice(0, i, j));
    auto labels = test.labels.slice(0, i, j);
    correct += logits.argmax(1).eq(labels).sum().item<double>();
    loss += F::cross_entropy(logits, labels, F::CrossEntropyFuncOptions().reduction(torch::kSum))
                .item<double>();
  }
  std::vector<double> totals{correct, loss, static_cast<double>(end - begin)};
  ctx.all_reduce_sum(totals);
  net.train();
  if (totals[2] <= 0) return {};
  return {totals[0] / totals[2], totals[1] / totals[2]};
}

// One rank's training run: the loop is small steps, each a method.
class Trainer {
 public:
  explicit Trainer(const Options& options)
      : m_options(options),
        m_ctx(dlrun::init(init_options(options))),
        m_train(on_device(fashion_mnist::load(options.data_dir, "train", options.train_limit),
                          m_ctx.device())),
        m_test(on_device(fashion_mnist::load(options.data_dir, "t10k"), m_ctx.device())),
        m_net(make_net(options.model, options.seed, m_ctx.device())),
        m_dp(m_net, m_ctx),
        m_optimizer(make_optimizer(options, m_net->parameters())),
        m_sampler(m_train.size(), m_ctx, options.seed),
        m_trace(options.trace_dir, m_ctx.rank()),
        m_gate(options.step_gate),
        m_progress(m_ctx.is_main()) {
    if (options.adaptive) m_adaptive.emplace(m_ctx, m_dp, *m_optimizer, adaptive_options(options));
    m_next_eval = options.eval_every;
  }

  int run() {
    restore();
    m_trace.start(m_ctx.world_size(), m_step);
    m_epoch_start = std::chrono::steady_clock::now();
    while (m_sampler.epoch() < m_options.epochs) {
      auto batch = m_sampler.next(m_adaptive ? m_adaptive->global_batch() : m_options.batch_size);
      if (!batch) {
        end_epoch();
        continue;
      }
      m_gate.wait_for(m_step + 1, [this] { return m_ctx.stop_pending(); });
      train_step(*batch);
      if (m_ctx.stop_requested()) return stop();
      if (m_options.checkpoint_every > 0 && m_step % m_options.checkpoint_every == 0) save();
      if (m_options.slow_ms > 0)
        std::this_thread::sleep_for(std::chrono::milliseconds(m_options.slow_ms));
      if (target_reached()) break;
    }
    examples::check_replicas_agree(*m_net, m_ctx);
    if (!m_tested) m_tested = evaluate(*m_net, m_test, m_ctx);
    if (m_ctx.is_main()) {
      fmt::print("test_accuracy={:.4f}\n", m_tested->accuracy);
      // What dlrun keeps with the job's record (dlrun status --json's "result"): a sweep's runs
      // compared without parsing their logs.
      if (const char* path = std::getenv(dlrun::env::k_result_file)) {
        if (std::FILE* f = std::fopen(path, "w")) {
          fmt::print(f, "{{\"test_accuracy\": {:.4f}, \"step\": {}}}\n", m_tested->accuracy, m_step);
          std::fclose(f);
        }
      }
    }
    return dlrun::exit_code::k_success;
  }

 private:
  static dlrun::AdaptiveBatchOptions adaptive_options(const Options& o) {
    dlrun::AdaptiveBatchOptions a;
    a.initial_batch = o.batch_size;
    a.max_batch = std::max(o.max_batch_size, o.batch_size);
    a.max_micro_batch = o.max_micro_batch;
    a.replan_every = o.replan_every;
    a.measure_every = o.measure_every;
    a.smoothing = o.smoothing;
    a.noise_floor = o.noise_floor;
    a.rule = *dlrun::parse_scaling_rule(o.scaling_rule);  // checked by the command line
    return a;
  }

  // Adam, or SGD with momentum (AdaptiveBatch's auto rule: the adam rule, or AdaScale).
  static std::unique_ptr<torch::optim::Optimizer> make_optimizer(
      const Options& o, const std::vector<torch::Tensor>& parameters) {
    if (o.optimizer == "sgd") {
      return std::make_unique<torch::optim::SGD>(
          parameters, torch::optim::SGDOptions(o.lr).momentum(o.momentum));
    }
    return std::make_unique<torch::optim::Adam>(parameters, torch::optim::AdamOptions(o.lr));
  }

  static std::shared_ptr<NetImpl> make_net(const std::string& model, uint64_t seed, const c10::Device& device) {
    torch::manual_seed(seed);  // rank 0's weights win anyway (DataParallel broadcasts them)
    auto net = std::make_shared<NetImpl>(model);
    net->to(device);
    return net;
  }

  void restore() {
    const std::string dir = examples::checkpoint_dir(m_options.checkpoint_dir, m_ctx);
    if (dir.empty()) return;
    m_ckpt.emplace(m_ctx, dir);
    m_ckpt->track("model", m_net);
    m_ckpt->track(m_options.optimizer, *m_optimizer);
    m_ckpt->track(m_sampler);
    if (m_adaptive) m_ckpt->track("adaptive", *m_adaptive);
    auto info = m_ckpt->restore();
    if (!info) return;
    m_step = info->step;
    m_loss_avg = info->values.count("loss") ? info->values.at("loss") : 0.0;
    examples::print_resumed(m_ctx, *info, m_sampler, fmt::format(", loss {:.4f}", m_loss_avg));
  }

  void save() {
    if (m_ckpt) m_ckpt->save(m_step, {{"loss", m_loss_avg}});
  }

  // Summed over the samples, scaled so that DataParallel's average over the ranks is the mean
  // over the global batch.
  at::Tensor loss_of(const std::vector<int64_t>& indices, const dlrun::SampleBatch& batch) {
    auto index = torch::tensor(indices, torch::kLong).to(m_ctx.device());
    auto images = m_train.images.index_select(0, index);
    auto labels = m_train.labels.index_select(0, index);
    return F::cross_entropy(m_net->forward(images), labels,
                            F::CrossEntropyFuncOptions().reduction(torch::kSum)) *
           batch.loss_scale(m_ctx.world_size());
  }

  // With --step-ms/--sample-ms: the GPU-like time a micro-batch stands for, slept before its
  // backward (inside the step that AdaptiveBatch times); `last`: the step's last micro-batch.
  // Nothing by default: sleep_ms(0) returns at once.
  void sleep_cost(size_t samples, bool last) const {
    examples::sleep_ms(
        m_options.cost.micro_batch_ms(static_cast<int64_t>(samples), last, m_ctx.world_size()));
  }

  // One optimizer step; returns this rank's loss (see train_step).
  double optimize(const dlrun::SampleBatch& batch) {
    if (!m_adaptive) {
      auto loss = loss_of(batch.indices, batch);
      sleep_cost(batch.indices.size(), true);
      m_dp.backward(loss);
      m_dp.step(*m_optimizer);
      return loss.item<double>();
    }
    // The losses are read after the optimizer step, as above: a read between backward and step
    // waits for the GPU, which then idles while the host launches the optimizer's kernels.
    at::Tensor total;
    auto parts = m_adaptive->split(batch.indices);
    for (size_t i = 0; i < parts.size(); ++i) {
      auto loss = loss_of(parts[i], batch);
      sleep_cost(parts[i].size(), i + 1 == parts.size());
      m_adaptive->backward(loss, i + 1 == parts.size());
      const at::Tensor value = loss.detach().to(at::kDouble);
      total = total.defined() ? total + value : value;
    }
    m_adaptive->step(batch.global_size);
    return total.item<double>();
  }

  void train_step(const dlrun::SampleBatch& batch) {
    m_tested.reset();
    const auto start = std::chrono::steady_clock::now();
    // Scaled by world_size / global batch, this rank's summed loss is its share's mean: a
    // noisy estimate of the global batch's mean loss (no extra allreduce for a log line).
    double step_loss = optimize(batch);
    m_optimizer->zero_grad();
    m_train_seconds +=
        std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
    ++m_step;
    m_epoch_samples += batch.global_size;
    m_samples += batch.global_size;
    m_loss_avg = m_step == 1 ? step_loss : 0.95 * m_loss_avg + 0.05 * step_loss;
    m_trace.samples(m_step, batch.epoch, batch.indices);
    m_trace.loss(m_step, m_loss_avg, step_loss);
    m_progress.update(m_sampler.epoch(), m_options.epochs, m_sampler.position(),
                      m_sampler.dataset_size(), m_loss_avg);
  }

  // With --target-accuracy or --target-test-loss: every --eval-every samples, is the test set
  // there yet?
  bool target_reached() {
    const bool by_accuracy = m_options.target_accuracy > 0;
    if ((!by_accuracy && m_options.target_test_loss <= 0) || m_samples < m_next_eval) return false;
    m_next_eval = m_samples + m_options.eval_every;
    m_tested = evaluate(*m_net, m_test, m_ctx);
    if (by_accuracy ? m_tested->accuracy < m_options.target_accuracy
                    : !(m_tested->loss <= m_options.target_test_loss)) {
      return false;
    }
    if (m_ctx.is_main()) {
      fmt::print("target reached: {} after {} samples, {} steps, {:.2f} s of training\n",
                 by_accuracy ? fmt::format("test_accuracy={:.4f}", m_tested->accuracy)
                             : fmt::format("test_loss={:.5f}", m_tested->loss),
                 m_samples, m_step, m_train_seconds);
      std::fflush(stdout);
    }
    return true;
  }

  void end_epoch() {
    m_progress.finish_epoch();
    double seconds =
        std::chrono::duration<double>(std::chrono::steady_clock::now() - m_epoch_start).count();
    m_tested = evaluate(*m_net, m_test, m_ctx);
    if (m_ctx.is_main()) {
      fmt::print("epoch {}/{}: loss {:.4f}, test accuracy {:.4f}, test loss {:.4f}, {:.1f} s, "
                 "{:.0f} samples/s{}\n",
                 m_sampler.epoch() + 1, m_options.epochs, m_loss_avg, m_tested->accuracy,
                 m_tested->loss, seconds,
                 m_epoch_samples / std::max(seconds, 1e-9),
                 m_adaptive ? examples::adaptive_summary(*m_adaptive) : "");
      std::fflush(stdout);
    }
    m_sampler.next_epoch();
    save();
    m_epoch_start = std::chrono::steady_clock::now();
    m_epoch_samples = 0;
  }

  int stop() {
    m_progress.finish_epoch();
    save();
    examples::print_stopped(m_ctx, m_step, m_sampler);
    return m_ctx.exit_code();
  }

  Options m_options;
  dlrun::Context m_ctx;
  fashion_mnist::Split m_train, m_test;
  std::shared_ptr<NetImpl> m_net;
  dlrun::DataParallel m_dp;
  std::unique_ptr<torch::optim::Optimizer> m_optimizer;
  dlrun::ElasticSampler m_sampler;
  std::optional<dlrun::AdaptiveBatch> m_adaptive;
  std::optional<dlrun::Checkpoint> m_ckpt;
  examples::Trace m_trace;
  examples::StepGate m_gate;
  fashion_mnist::Progress m_progress;
  int64_t m_step = 0;
  double m_loss_avg = 0;
  std::optional<TestResult> m_tested;  // of the weights as they are now
  std::chrono::steady_clock::time_point m_epoch_start;
  int64_t m_epoch_samples = 0;
  int64_t m_samples = 0;  // trained on in this run (not restored)
  int64_t m_next_eval = 0;
  double m_train_seconds = 0;  // in optimizer steps, without evaluation and checkpoints
};

void use_launcher_threads() {
  // dlrun sets OMP_NUM_THREADS to cores / ranks; LibTorch's intra-op pool follows it.
  if (const char* threads = std::getenv(dlrun::env::k_omp_num_threads)) {
    at::set_num_threads(std::max(1, std::atoi(threads)));
  }
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
  app.add_option("--optimizer", options.optimizer,
                 "adam, or sgd with --momentum (--adaptive: the adam rule, or AdaScale)")
      ->check(CLI::IsMember({"adam", "sgd"}))
      ->capture_default_str();
  app.add_option("--lr", options.lr,
                 fmt::format("Learning rate (default: {:g} with adam, {:g} with sgd)",
                             k_adam_lr, k_sgd_lr))
      ->check(examples::k_positive);
  auto* momentum = app.add_option("--momentum", options.momentum, "SGD's momentum")
                       ->check(examples::k_unit_interval)
                       ->capture_default_str();
  app.add_option("--seed", options.seed, "Seed of the weights and of the sample order");
  app.add_option("--data-dir", options.data_dir, "Directory of the Fashion-MNIST .gz files");
  app.add_option("--trace-dir", options.trace_dir,
                 "Append the samples each rank trains on and the loss here (for tests)");
  app.add_option("--slow-ms", options.slow_ms, "Sleep this long after each step (for benchmarks)");
  app.add_option("--step-gate", options.step_gate,
                 "Take step S only once this file holds a number >= S (tests pace training with it)");
  app.add_flag(
      "--adaptive", options.adaptive,
      "Choose the batch size by goodput and scale the learning rate (dlrun::AdaptiveBatch); "
      "--batch-size is the initial batch and --lr its learning rate");
  app.add_option("--max-batch-size", options.max_batch_size,
                 "Largest global batch --adaptive may choose")
      ->check(CLI::PositiveNumber);
  app.add_option(
      "--max-micro-batch", options.max_micro_batch,
      "Largest per-rank micro-batch (--adaptive accumulates gradients beyond it; 0: no limit)");
  app.add_option("--replan-every", options.replan_every,
                 "Optimizer steps between --adaptive's decisions (0: 25 on a GPU, 50 on the CPU)")
      ->check(examples::k_non_negative)
      ->capture_default_str();
  app.add_flag("!--no-noise-floor", options.noise_floor,
               "--adaptive chooses by goodput alone, without the noise floor a larger batch's "
               "lower rate per sample trains towards (docs/adaptive.md, \"The noise floor\")");
  app.add_option("--measure-every", options.measure_every,
                 "Optimizer steps between --adaptive's measurements of the gradient noise scale")
      ->check(CLI::PositiveNumber);
  app.add_option("--smoothing", options.smoothing,
                 "Weight --adaptive's noise-scale average keeps per --batch-size samples (0 < S < 1)")
      ->check(examples::k_fraction)
      ->capture_default_str();
  app.add_option("--scaling-rule", options.scaling_rule,
                 "Learning-rate rule of --adaptive: auto, adascale, adam, linear, sqrt, none")
      ->check(examples::k_scaling_rule);
  app.add_option("--target-accuracy", options.target_accuracy,
                 "Stop once the test accuracy reaches this (checked every --eval-every samples)");
  app.add_option("--target-test-loss", options.target_test_loss,
                 "Stop once the test set's mean cross-entropy is at most this (checked every "
                 "--eval-every samples)")
      ->check(examples::k_positive)
      ->excludes("--target-accuracy");
  app.add_option("--eval-every", options.eval_every,
                 "Samples between checks of --target-accuracy or --target-test-loss")
      ->check(CLI::PositiveNumber);
  app.add_option("--model", options.model, "The model: cnn (0.2 M parameters) or mlp (784-256-10)")
      ->check(CLI::IsMember({"cnn", "mlp"}));
  app.add_option("--device", options.device,
                 "Train on: auto (what dlrun started the rank as: a GPU with --gpus), cpu, cuda")
      ->check(CLI::IsMember({"auto", "cpu", "cuda"}));
  examples::add_step_cost_options(app, options.cost);
  try {
    app.parse(argc, argv);
    if (momentum->count() > 0 && options.optimizer != "sgd") {
      throw CLI::ValidationError("--momentum", "applies to --optimizer sgd only");
    }
  } catch (const CLI::ParseError& e) {
    return app.exit(e) == 0 ? 0 : dlrun::exit_code::k_usage;
  }
  if (options.lr <= 0) options.lr = options.optimizer == "sgd" ? k_sgd_lr : k_adam_lr;
  return examples::run_main("fashion_mnist", [&] {
    use_launcher_threads();
    return Trainer(options).run();
  });
}
