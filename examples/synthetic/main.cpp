// A synthetic training program for the goodput scheduler: its step time follows a declared,
// GPU-like cost that it sleeps (step_cost.hpp), and its gradients come from a real small
// problem with a chosen noise level (regression.hpp), so that dlrun::AdaptiveBatch measures a
// real gradient noise scale, fits a real throughput model and publishes
// RUN_DIR/goodput-model.json, while many simulated GPUs share a couple of cores:
//
//   DLRUN_FAKE_GPUS=8 dlrun local --gpus 2:8 ./dlrun_synthetic --noise 4
//
// Ranks always train on the CPU (also under --gpus), one thread each. Stops, resizes and
// restarts work as in examples/fashion_mnist: all ranks stop after the same step, rank 0
// checkpoints, they exit 75, and the next start resumes exactly, at any number of ranks.
// The last line rank 0 prints is
// `synthetic: done steps=S samples=N epochs=E final_loss=L seconds=T`. README.md has the rest.

#include <ATen/Parallel.h>
#include <fmt/format.h>
#include <torch/nn/functional/loss.h>
#include <torch/nn/modules/linear.h>
#include <torch/optim/sgd.h>
#include <torch/utils.h>

#include <CLI/CLI.hpp>
#include <algorithm>
#include <chrono>
#include <cstdlib>
#include <optional>
#include <string>
#include <vector>

#include "dlrun/protocol.hpp"
#include "dlrun/runtime.hpp"
#include "regression.hpp"
#include "replica_check.hpp"
#include "run_report.hpp"
#include "cli_options.hpp"
#include "step_cost.hpp"
#include "step_gate.hpp"
#include "trace.hpp"

namespace F = torch::nn::functional;

namespace {

struct Options {
  int64_t samples = 16384;
  int64_t epochs = 2;
  int64_t dim = 16;
  uint64_t seed = 1;
  double noise = 1.0;
  double condition = 1.0;  // the curvature's spread over the features (regression.hpp)
  std::string scaling_rule = "adascale";
  int64_t batch_size = 64;  // global, over all ranks
  int64_t max_batch_size = 2048;
  int64_t max_micro_batch = 0;
  int64_t replan_every = 0;
  bool noise_floor = true;
  bool fixed = false;
  bool count_progress = false;  // --epochs in scale-invariant progress, not samples seen
  double target_loss = 0;       // stop once the data set's mean squared error is at most this
  int64_t eval_every = 0;       // samples between two checks of the target (0: each epoch's end)
  double lr = 0.02;
  examples::StepCost cost{20, 0.05, 2};
  std::string checkpoint_dir;
  std::string trace_dir;
  std::string step_gate;
};

dlrun::InitOptions init_options() {
  dlrun::InitOptions init;
  // Under `--gpus` (real or DLRUN_FAKE_GPUS) the launcher asks for CUDA; the cost is slept, so
  // the compute stays on the CPU and needs no GPU.
  init.device = dlrun::DeviceKind::cpu;
  return init;
}

dlrun::AdaptiveBatchOptions adaptive_options(const Options& o) {
  dlrun::AdaptiveBatchOptions a;
  a.initial_batch = o.batch_size;
  a.max_batch = std::max(o.max_batch_size, o.batch_size);
  a.max_micro_batch = o.max_micro_batch;
  a.replan_every = o.replan_every;
  a.noise_floor = o.noise_floor;
  a.rule = *dlrun::parse_scaling_rule(o.scaling_rule);  // checked by the command line
  return a;
}

double seconds_since(std::chrono::steady_clock::time_point start) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
}

// One rank's training run: the loop is small steps, each a method.
class Trainer {
 public:
  explicit Trainer(const Options& options)
      : m_options(options),
        m_ctx(dlrun::init(init_options())),
        m_data(
            synthetic::make_regression(options.samples, options.dim, options.noise, options.seed,
                                   options.condition)),
        m_net(make_net(options)),
        m_dp(m_net.ptr(), m_ctx),
        m_sgd(m_net->parameters(), torch::optim::SGDOptions(options.lr)),
        m_sampler(m_data.size(), m_ctx, options.seed),
        m_trace(options.trace_dir, m_ctx.rank()),
        m_gate(options.step_gate) {
    if (!options.fixed) m_adaptive.emplace(m_ctx, m_dp, m_sgd, adaptive_options(options));
  }

  int run() {
    restore();
    m_trace.start(m_ctx.world_size(), m_step);
    m_start = std::chrono::steady_clock::now();
    m_epoch_start = m_start;
    while (!done()) {
      auto batch = m_sampler.next(m_adaptive ? m_adaptive->global_batch() : m_options.batch_size);
      if (!batch) {
        end_epoch();
        continue;
      }
      m_gate.wait_for(m_step + 1, [this] { return m_ctx.stop_pending(); });
      train_step(*batch);
      if (target_check_due() && reached_target()) break;
      if (m_ctx.stop_requested()) return stop();
    }
    examples::check_replicas_agree(*m_net, m_ctx);
    if (!m_dataset_loss) m_dataset_loss = dataset_loss();
    if (m_ctx.is_main()) {
      fmt::print("synthetic: done steps={} samples={} epochs={} final_loss={:.6f} seconds={:.3f}\n",
                 m_step, m_samples, m_options.epochs, *m_dataset_loss, seconds_since(m_start));
    }
    return dlrun::exit_code::k_success;
  }

 private:
  // Trained enough: --epochs epochs of samples seen, or with --count-progress of AdaScale's
  // scale-invariant progress (each step counts its gain x --batch-size samples; every rank
  // computes the same gain from the same reduced gradient statistics, so all stop together).
  bool done() const {
    if (m_reached) return true;
    if (!m_options.count_progress || !m_adaptive) return m_sampler.epoch() >= m_options.epochs;
    return m_adaptive->progress() * static_cast<double>(m_options.batch_size) >=
           static_cast<double>(m_options.epochs * m_options.samples);
  }

  static torch::nn::Linear make_net(const Options& options) {
    torch::manual_seed(options.seed);  // rank 0's weights win anyway (DataParallel broadcasts)
    return torch::nn::Linear(options.dim, 1);
  }

  void restore() {
    const std::string dir = examples::checkpoint_dir(m_options.checkpoint_dir, m_ctx);
    if (dir.empty()) return;
    m_ckpt.emplace(m_ctx, dir);
    m_ckpt->track("model", m_net.ptr());
    m_ckpt->track("sgd", m_sgd);
    m_ckpt->track(m_sampler);
    if (m_adaptive) m_ckpt->track("adaptive", *m_adaptive);
    auto info = m_ckpt->restore();
    if (!info) return;
    m_step = info->step;
    m_samples =
        info->values.count("samples") ? static_cast<int64_t>(info->values.at("samples")) : 0;
    examples::print_resumed(m_ctx, *info, m_sampler);
  }

  void save() {
    if (m_ckpt) m_ckpt->save(m_step, {{"samples", static_cast<double>(m_samples)}});
  }

  // Summed over the samples and scaled so that DataParallel's average over the ranks is the
  // mean over the global batch.
  at::Tensor loss_of(const std::vector<int64_t>& indices, const dlrun::SampleBatch& batch) {
    auto index = torch::tensor(indices, torch::kLong);
    auto prediction = m_net->forward(m_data.x.index_select(0, index));
    return F::mse_loss(prediction, m_data.y.index_select(0, index),
                       F::MSELossFuncOptions().reduction(torch::kSum)) *
           batch.loss_scale(m_ctx.world_size());
  }

  // One micro-batch: its loss, the GPU time it stands for, and its backward.
  double micro_step(const std::vector<int64_t>& indices, const dlrun::SampleBatch& batch,
                    bool last) {
    auto loss = loss_of(indices, batch);
    examples::sleep_ms(m_options.cost.micro_batch_ms(static_cast<int64_t>(indices.size()), last,
                                                      m_ctx.world_size()));
    if (m_adaptive) {
      m_adaptive->backward(loss, last);
    } else {
      m_dp.backward(loss);
    }
    return loss.item<double>();
  }

  // One optimizer step; returns this rank's share of the global batch's mean loss.
  double optimize(const dlrun::SampleBatch& batch) {
    if (!m_adaptive) {
      double loss = micro_step(batch.indices, batch, true);
      m_dp.step(m_sgd);
      return loss;
    }
    double total = 0;
    auto parts = m_adaptive->split(batch.indices);
    for (size_t i = 0; i < parts.size(); ++i)
      total += micro_step(parts[i], batch, i + 1 == parts.size());
    m_adaptive->step(batch.global_size);
    return total;
  }

  void train_step(const dlrun::SampleBatch& batch) {
    m_dataset_loss.reset();
    const double step_loss = optimize(batch);
    m_sgd.zero_grad();
    ++m_step;
    m_samples += batch.global_size;
    m_last_batch = batch.global_size;
    m_epoch_samples += batch.global_size;
    m_loss_avg = m_loss_avg < 0 ? step_loss : 0.95 * m_loss_avg + 0.05 * step_loss;
    m_trace.samples(m_step, batch.epoch, batch.indices);
    m_trace.loss(m_step, m_loss_avg, step_loss);
  }

  // The mean squared error over the whole data set (collective: each rank takes its share).
  double dataset_loss() {
    torch::NoGradGuard no_grad;
    auto [begin, end] =
        dlrun::ElasticSampler::share(m_data.size(), m_ctx.rank(), m_ctx.world_size());
    auto error = m_net->forward(m_data.x.slice(0, begin, end)) - m_data.y.slice(0, begin, end);
    std::vector<double> sum{error.pow(2).sum().item<double>()};
    m_ctx.all_reduce_sum(sum);
    return sum[0] / static_cast<double>(m_data.size());
  }

  // --target-loss: every --eval-every samples of the whole training (every rank agrees: the
  // count is global and restored from the checkpoint).
  bool target_check_due() const {
    if (m_options.target_loss <= 0 || m_options.eval_every <= 0) return false;
    return m_samples / m_options.eval_every != (m_samples - m_last_batch) / m_options.eval_every;
  }

  // The data set's loss against --target-loss; the check's own time is not training time. All
  // ranks compute the same reduced loss, so all stop after the same step.
  bool reached_target() {
    const auto start = std::chrono::steady_clock::now();
    m_dataset_loss = dataset_loss();
    m_check_seconds += seconds_since(start);
    return at_target();
  }

  // Whether the loss just computed reaches --target-loss; says so once, when it does.
  bool at_target() {
    // Written so that a loss that is not a number (a diverged run) never counts as reached.
    if (m_options.target_loss <= 0 || !(*m_dataset_loss <= m_options.target_loss)) return false;
    m_reached = true;
    if (m_ctx.is_main()) {
      fmt::print("target reached: loss={:.6f} after {} samples, {} steps, {:.3f} s\n",
                 *m_dataset_loss, m_samples, m_step, seconds_since(m_start) - m_check_seconds);
      std::fflush(stdout);
    }
    return true;
  }

  void end_epoch() {
    const double seconds = seconds_since(m_epoch_start);
    m_dataset_loss = dataset_loss();
    if (m_options.eval_every <= 0) at_target();
    if (m_ctx.is_main()) {
      fmt::print("epoch {}: loss {:.6f}, {:.1f} s, {:.0f} samples/s{}\n", epoch_label(), *m_dataset_loss, seconds,
                 m_epoch_samples / std::max(seconds, 1e-9), batch_summary());
      std::fflush(stdout);
    }
    m_sampler.next_epoch();
    save();
    m_epoch_start = std::chrono::steady_clock::now();
    m_epoch_samples = 0;
  }

  // "2/3", or with --count-progress "2 (1.61 of 3 in progress)".
  std::string epoch_label() const {
    if (!m_options.count_progress || !m_adaptive) {
      return fmt::format("{}/{}", m_sampler.epoch() + 1, m_options.epochs);
    }
    const double done = m_adaptive->progress() * static_cast<double>(m_options.batch_size) /
                        static_cast<double>(m_options.samples);
    return fmt::format("{} ({:.2f} of {} in progress)", m_sampler.epoch() + 1, done, m_options.epochs);
  }

  std::string batch_summary() const {
    if (!m_adaptive) return fmt::format(", batch {} (fixed)", m_options.batch_size);
    return examples::adaptive_summary(*m_adaptive);
  }

  int stop() {
    save();
    examples::print_stopped(m_ctx, m_step, m_sampler);
    return m_ctx.exit_code();
  }

  Options m_options;
  dlrun::Context m_ctx;
  synthetic::Regression m_data;
  torch::nn::Linear m_net;
  dlrun::DataParallel m_dp;
  torch::optim::SGD m_sgd;
  dlrun::ElasticSampler m_sampler;
  std::optional<dlrun::AdaptiveBatch> m_adaptive;
  std::optional<dlrun::Checkpoint> m_ckpt;
  examples::Trace m_trace;
  examples::StepGate m_gate;
  int64_t m_step = 0;
  int64_t m_samples = 0;  // over the whole training, restored from the checkpoint
  int64_t m_epoch_samples = 0;
  int64_t m_last_batch = 0;
  bool m_reached = false;        // --target-loss reached: training is done
  double m_check_seconds = 0;    // spent on --eval-every checks, not training
  double m_loss_avg = -1;
  std::optional<double> m_dataset_loss;  // of the weights as they are now
  std::chrono::steady_clock::time_point m_start, m_epoch_start;
};

using examples::k_non_negative;
using examples::k_positive;

void add_options(CLI::App& app, Options& o) {
  app.add_option("--samples", o.samples, "Samples in the data set")->check(k_positive);
  app.add_option("--epochs", o.epochs, "Epochs to train")->check(k_positive);
  app.add_option("--dim", o.dim, "Features of each sample (the model is Linear(dim, 1))")
      ->check(k_positive);
  app.add_option("--seed", o.seed, "Seed of the data set, the weights and the sample order");
  app.add_option("--noise", o.noise,
                 "SIGMA in y = x.w* + SIGMA*eps: higher means a larger gradient noise scale, so "
                 "larger batches pay")
      ->check(k_non_negative);
  app.add_option("--condition", o.condition,
                 "Ratio of the loss's largest curvature to its smallest (features scaled apart): "
                 "1 is well conditioned and converges in tens of steps, 1000 needs thousands")
      ->check(examples::k_at_least_one);
  app.add_option("--batch-size", o.batch_size,
                 "Global batch (over all ranks): the initial one, or the only one with --fixed")
      ->check(k_positive);
  app.add_option("--max-batch-size", o.max_batch_size,
                 "Largest global batch AdaptiveBatch may choose")
      ->check(k_positive);
  app.add_option("--max-micro-batch", o.max_micro_batch,
                 "Largest per-rank micro-batch, as a GPU's memory limits it (AdaptiveBatch "
                 "accumulates gradients beyond it; 0: no limit)")
      ->check(k_non_negative);
  app.add_flag("!--no-noise-floor", o.noise_floor,
               "AdaptiveBatch chooses by goodput alone, without the noise floor (docs/adaptive.md)");
  app.add_option("--replan-every", o.replan_every,
                 "Optimizer steps between AdaptiveBatch's fits and decisions (each fit publishes "
                 "RUN_DIR/goodput-model.json; 0: automatic, 50 here, as this example computes on "
                 "the CPU)")
      ->check(k_non_negative)
      ->capture_default_str();
  app.add_option("--scaling-rule", o.scaling_rule,
                 "Learning-rate rule of AdaptiveBatch: adascale (the gain), sqrt (the square root "
                 "of the batch's growth), linear, adam, auto, none")
      ->check(examples::k_scaling_rule)
      ->capture_default_str();
  app.add_flag("--fixed", o.fixed, "Train at --batch-size throughout (no AdaptiveBatch)");
  app.add_flag("--count-progress", o.count_progress,
               "Count --epochs in AdaScale's scale-invariant progress (each step: its gain x "
               "--batch-size samples) instead of samples seen, so a batch beyond the noise scale "
               "trains longer for the same progress (as Pollux measures completion)");
  app.add_option("--target-loss", o.target_loss,
                 "Stop once the mean squared error over the data set is at most this (checked every "
                 "--eval-every samples, else at each epoch's end); prints 'target reached: …'")
      ->check(k_non_negative);
  app.add_option("--eval-every", o.eval_every, "Samples between two checks of --target-loss")
      ->check(k_non_negative);
  app.add_option("--lr", o.lr,
                 "SGD learning rate at --batch-size (AdaScale raises it with the batch; keep "
                 "lr x max-batch-size / batch-size below 1)")
      ->check(k_positive);
  examples::add_step_cost_options(app, o.cost);
  app.add_option("--checkpoint-dir", o.checkpoint_dir,
                 "Checkpoint directory (default: $DLRUN_RUN_DIR/checkpoints; none without dlrun)");
  app.add_option("--trace-dir", o.trace_dir,
                 "Append the samples each rank trains on and the loss here (for tests; "
                 "examples/common/trace.hpp)");
  app.add_option(
      "--step-gate", o.step_gate,
      "Take step S only once this file holds a number >= S (tests pace training with it)");
}

}  // namespace

int main(int argc, char** argv) {
  Options options;
  CLI::App app{
      "Synthetic training for the goodput scheduler: sleeps a declared GPU-like step cost, "
      "learns a noisy linear regression (run it with `dlrun local --nproc N` or, with "
      "DLRUN_FAKE_GPUS=N, `dlrun local --gpus N`)"};
  add_options(app, options);
  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    return app.exit(e) == 0 ? 0 : dlrun::exit_code::k_usage;
  }
  return examples::run_main("synthetic", [&] {
    at::set_num_threads(1);  // many ranks share a few cores; the real compute is tiny
    return Trainer(options).run();
  });
}
