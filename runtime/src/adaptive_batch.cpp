#include "dlrun/adaptive_batch.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <exception>
#include <optional>
#include <string>
#include <utility>

#include "adaptive_state.hpp"
#include "dlrun/data_parallel.hpp"
#include "dlrun/elastic_sampler.hpp"
#include "dlrun/log.hpp"
#include "dlrun/protocol.hpp"
#include "dlrun/runtime_errors.hpp"
#include "goodput/divergence.hpp"
#include "goodput/goodput.hpp"
#include "goodput/goodput_model.hpp"
#include "goodput/gradient_noise_scale.hpp"
#include "goodput/noise_floor.hpp"
#include "goodput/throughput_model.hpp"
#include "gradient_norms.hpp"
#include "metrics_log.hpp"
#include "model_file.hpp"

namespace dlrun {

static_assert(AdaptiveStats::k_unbounded_noise_scale == runtime::k_unbounded_noise_scale,
              "the public ceiling of the noise scale is the estimator's");

namespace {

// The Adam preconditioner of the gradient norms is refreshed before every measurement during
// the first k_preconditioner_warmup steps (Adam's moments still move fast), then before a
// measurement at least k_preconditioner_every steps after the last refresh (β2 ≈ 0.999: they
// move slowly).
constexpr int64_t k_preconditioner_warmup = 200;
constexpr int64_t k_preconditioner_every = 10;

// What AdaptiveBatch's own work may cost, as a share of the training time (docs/adaptive.md,
// "What it costs"): the noise scale's measurements stretch their cadence (up to
// k_max_measure_every steps apart) to stay within k_measure_budget of a step, and decisions
// (fitting the throughput model, publishing it) come no more often than keeps them within
// k_replan_budget.
constexpr double k_measure_budget = 0.005;
constexpr double k_replan_budget = 0.0025;
constexpr int64_t k_max_measure_every = 128;
// The first decisions rest on the first measurements: the first k_measure_warmup steps are
// all measured, whatever the cadence.
constexpr int64_t k_measure_warmup = 100;
// The first decisions come every replan_every steps whatever they cost (a bounded cost: the
// batch should move early); the budget spaces the later ones.
constexpr int64_t k_free_decisions = 10;
// A decision goes at most this factor beyond the largest batch the run has trained at: the
// throughput model is fitted to the sizes measured, and far beyond them it only extrapolates
// (it once chose 4096 after measuring 64 and 108, and predicted 8x the goodput measured there).
constexpr int64_t k_max_growth = 2;
// replan_every 0 (automatic): on a GPU decisions come every k_gpu_replan_every steps, on the CPU
// every k_cpu_replan_every. Measured on one H200 (docs/benchmarks.md, "Lease 4"): the CNN to a
// test loss of 0.26 took 0.89-0.94x the time (median 0.92x) with 25 as with 50, in 4 passes of
// 4 (and 0.79-0.95x in 4 more with a faster climb not kept), where a step costs about the same
// at any batch and the climb from 64 set the pace; on the CPU, 25 was no faster on the MLP and
// slower on the CNN (docs/adaptive.md, "Decisions").
constexpr int64_t k_gpu_replan_every = 25;
constexpr int64_t k_cpu_replan_every = 50;

double steady_seconds() {
  return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count();
}

ScalingRule resolve_rule(ScalingRule rule, OptimizerKind kind) {
  if (rule != ScalingRule::automatic) return rule;
  return kind == OptimizerKind::sgd_like ? ScalingRule::adascale : ScalingRule::adam;
}

// A learning rate × √scale earns the square-root efficiency only from an optimizer that
// divides its step by √v̂ (docs/adaptive.md, "Why Adam's efficiency is the square root");
// every other pairing keeps Pollux's.
runtime::EfficiencyModel efficiency_for(ScalingRule rule, OptimizerKind kind) {
  const bool root_rate = rule == ScalingRule::adam || rule == ScalingRule::sqrt;
  return root_rate && kind != OptimizerKind::sgd_like ? runtime::EfficiencyModel::adam
                                                      : runtime::EfficiencyModel::sgd;
}

void check_options(const AdaptiveBatchOptions& o, int world_size) {
  auto fail = [](const std::string& what) { throw ConfigError("AdaptiveBatch: " + what); };
  if (o.initial_batch < 1) fail("initial_batch must be at least 1");
  if (o.max_batch < o.initial_batch)
    fail(fmt::format("max_batch ({}) is below initial_batch ({})", o.max_batch, o.initial_batch));
  if (o.min_micro_batch < 1) fail("min_micro_batch must be at least 1");
  if (o.max_micro_batch != 0 && o.max_micro_batch < o.min_micro_batch)
    fail("max_micro_batch is below min_micro_batch");
  if (o.replan_every < 0) fail("replan_every must be at least 1, or 0 (automatic)");
  if (o.measure_every < 1) fail("measure_every must be at least 1");
  if (!(o.smoothing > 0 && o.smoothing < 1)) fail("smoothing must be in (0, 1)");
  if (o.log_every < 0) fail("log_every must not be negative");
  if (!(o.min_improvement >= 0)) fail("min_improvement must be at least 0");
  if (o.max_batch < int64_t{world_size} * o.min_micro_batch) {
    fail(fmt::format("max_batch ({}) leaves less than min_micro_batch ({}) for each of {} ranks",
                     o.max_batch, o.min_micro_batch, world_size));
  }
  // Without accumulation a rank trains its whole share at once: max_micro_batch (its memory)
  // bounds the initial batch too (it was exceeded without a word).
  const int64_t per_rank = (o.initial_batch + world_size - 1) / world_size;
  if (!o.accumulation && o.max_micro_batch > 0 && per_rank > o.max_micro_batch) {
    fail(fmt::format("initial_batch ({}) is {} samples a rank on {} rank(s), above max_micro_batch ({}), and "
                     "accumulation is off",
                     o.initial_batch, per_rank, world_size, o.max_micro_batch));
  }
}

}  // namespace

struct AdaptiveBatch::Impl {
  Impl(Context ctx, DataParallel& dp, std::shared_ptr<OptimizerAdapter> optimizer,
       AdaptiveBatchOptions o)
      : context(std::move(ctx)),
        dp(dp),
        optimizer(std::move(optimizer)),
        options(std::move(o)),
        noise(1, static_cast<double>(options.initial_batch), options.smoothing) {}

  Context context;
  DataParallel& dp;
  std::shared_ptr<OptimizerAdapter> optimizer;
  AdaptiveBatchOptions options;
  ScalingRule rule = ScalingRule::adascale;
  // Set with the rule: the adam efficiency for an adaptive optimizer at √scale rates.
  runtime::EfficiencyModel efficiency_model = runtime::EfficiencyModel::sgd;
  runtime::ParamGroups groups;
  std::vector<double> base_lr;
  runtime::GradientNoiseScale noise;
  runtime::ThroughputProfile profile;
  runtime::PreviousGradients previous;  // a world of one, where a step cannot be halved
  runtime::HalfGradients halves;
  // Adam's denominators, refreshed before measurements; null for SGD-like optimizers.
  std::shared_ptr<runtime::Preconditioner> preconditioner;
  int64_t preconditioner_step = -1;  // the step after which it was last refreshed
  BatchShape shape;
  AdaptiveStats stats;
  // The losses observed (rank 0) since the last decision: a device tensor, read back at the
  // decision (the noise floor's interval mean, the divergence watch) and at each metrics line,
  // and their steps. What the last metrics line read of them (stats.loss is the mean since:
  // a decision interval may be hundreds of steps long); negative: the part of the interval
  // before a decision not yet reported.
  at::Tensor loss_sum;
  bool loss_this_step = false;
  // Steps in a row that trained fewer samples than the batch chosen (an epoch's short last one
  // is one step), and whether that was said.
  int short_steps = 0;
  bool short_said = false;
  int64_t loss_steps = 0;
  double reported_loss_sum = 0;
  int64_t reported_loss_steps = 0;
  // After the loss ran away (DivergenceWatch, rank 0): the largest global batch allowed from
  // then on, the one where the loss was lowest (0: none). Checkpointed.
  int64_t backoff_cap = 0;
  // The trend's clock: seconds of the steps timed (record_time), so that evaluations and
  // checkpoints between steps do not count as time the loss did not fall in.
  double train_seconds = 0;
  double interval_begin = 0;        // train_seconds when the decision interval began
  int64_t interval_begin_step = 0;  // and the step
  bool loss_seen = false;           // a loss was observed since the start (or the restore)
  bool warned_no_loss = false;
  runtime::LossTrend trend;
  runtime::DivergenceWatch divergence;  // rank 0: warns once of a loss that runs away
  double fall_rate = -1, fall_goodput = 0;  // -1: none measured yet
  void forget_trend() {
    trend.clear();
    fall_rate = -1;
    fall_goodput = 0;
  }
  std::string floor_why;    // rank 0: why the floor chose the next batch, for the log
  bool replan_due = false;  // restored with another world size: re-plan at the next step
  std::optional<runtime::MetricsLog> metrics;
  std::optional<runtime::ModelFile> model_file;  // RUN_DIR/goodput-model.json, rank 0

  // Timing of the step in flight.
  double now() const { return options.clock ? options.clock() : steady_seconds(); }
  double mark = now();
  bool time_this_step = false;  // the first step (and the first after a switch) warms up
  double interval_start = now();
  int64_t interval_samples = 0;
  int64_t logged_step = -1;  // the step of the last metrics line (a switch logs before it)
  bool log_due() const {
    return options.log_every > 0 && stats.step % options.log_every == 0 &&
           logged_step != stats.step;
  }

  runtime::BatchLimits limits() const;
  BatchShape shape_for(int64_t global_batch) const;
  runtime::StepShape step_shape() const;
  // Step `step` measures the noise scale. A world of one compares the two halves of a measured
  // step's batch (HalfGradients): with several micro-batches a step, the first half of them and
  // the rest, at no extra cost; with one, split() trains the step as two micro-batches of half
  // the size (a "resplit" step). Where it cannot (halvable() false), the step before keeps its
  // gradient for the measurement (two consecutive steps, biased: gradient_norms.hpp).
  int64_t measure_every = 1;  // options.measure_every, stretched by replan() within the budget
  int64_t next_replan = 0;    // the step after which the next decision comes
  int64_t decisions = 0;      // made in this process
  int64_t largest_batch = 0;  // the largest global batch trained at (since the last restore)
  bool halves_work = true;  // false once a measured step came without its first half's gradient
  bool halvable() const {
    return context.world_size() == 1 && halves_work && options.accumulation &&
           shape.global_batch >= 2;
  }
  // A resplit step's micro-batches are not the shape's, so it is not timed for the shape: in
  // the warm-up (every step measured elsewhere) every other step is resplit, and after it
  // never two steps in a row, so that the steps between time the shape.
  bool resplits() const { return halvable() && shape.accum_steps == 1; }
  // Steps between measurements at `step` (a measurement stands for them).
  int64_t measure_period(int64_t step) const {
    if (step < k_measure_warmup) return resplits() ? 2 : 1;
    return resplits() ? std::max<int64_t>(measure_every, 2) : measure_every;
  }
  bool measures(int64_t step) const {
    const int64_t every = measure_period(step);
    return step < k_measure_warmup ? step % every == every - 1 : step % every == 0;
  }
  bool keeps_gradient(int64_t step) const {
    return context.world_size() == 1 && !halvable() && !measures(step) && measures(step + 1);
  }
  bool in_measurement(int64_t step) const { return measures(step) || keeps_gradient(step); }
  // The step in flight is measured on halves (set for the next step by prepare_step), and
  // resplit; what split() made of it: the samples of the first half and its micro-batches, and
  // the first half's micro-batches trained so far (accumulated()).
  bool halved = false, resplit = false;
  bool split_halved = false;
  int64_t first_half = 0;
  int first_half_parts = 0, half_parts_done = 0;
  // A resplit step times a step at the half size (its second half takes the optimizer step)
  // for the throughput profile: a second micro-batch size, which tells a step's fixed cost from
  // its cost per sample (a GPU's small batches cost alike). The first resplit step at a shape
  // warms that size up and is not profiled.
  bool halves_warm = false;
  double step_start = mark;  // when the step in flight began (the end of the one before)
  // Rank 0's step times since the shape last changed, measured steps and the others apart:
  // what a measurement costs.
  double measured_seconds = 0, plain_seconds = 0;
  int64_t measured_steps = 0, plain_steps = 0;
  void reset_costs() { measured_seconds = plain_seconds = 0, measured_steps = plain_steps = 0; }
  // The cadences the next decision sets, from what measurements and this decision cost.
  std::pair<int64_t, int64_t> cadences(double replan_seconds) const;
  void prepare_step();  // what the next step (stats.step) takes from the gradients
  // stats' gain, rate factor and noise scale (with |G|² and tr Σ) from the noise scale's
  // averages, for the current batch; returns the batch's scale (over the initial batch).
  double refresh_noise_stats() {
    const double scale = static_cast<double>(shape.global_batch) / static_cast<double>(options.initial_batch);
    stats.gain = noise.gain(scale);
    stats.lr_factor = lr_factor(rule, stats.gain, scale);
    stats.noise_scale = noise.noise_scale();
    stats.grad_sqr = noise.sqr();
    stats.grad_var = noise.var();
    return scale;
  }
  void observe_noise(int64_t samples);
  void apply_lr(double factor);
  // False: not a step time (warm-up, user code between steps); else the step's time (of its
  // last micro-batch) is added to the throughput profile.
  bool record_time(double seconds);
  // The same for a resplit step: the whole of it, and its second half (a step at the half size).
  bool record_resplit_time(double whole, double second_half, int64_t samples);
  // A time 4x the mean of the profile's at this micro-batch size (user code between steps).
  bool outlier(double seconds, int64_t micro) const;
  void replan();
  void warn_divergence(const runtime::DivergenceWatch::Alarm& alarm) const;
  void switch_to(const BatchShape& next, const char* why);
  // `end`: when the interval ended (default: now; the last step's end when AdaptiveBatch goes,
  // so that evaluation or a checkpoint after the loop is not counted as training).
  void log_metrics(std::optional<double> end = std::nullopt);
  // stats.loss from the losses observed since it was last taken (rank 0).
  void take_recent_loss();
  void publish_model(const runtime::ThroughputParams& params, double noise_scale);
  void close_loss_interval(double end);
  std::vector<double> adam_denominators() const;
  double floor_at(double batch, const std::vector<double>& denominators,
                  double momentum_gain) const;
  std::optional<runtime::FloorInputs> floor_inputs(const runtime::GoodputPoint& current);
  struct FloorVerdict {
    bool judged = false;
    std::optional<runtime::GoodputPoint> target;  // none: stay
  };
  FloorVerdict floor_decision(const runtime::ThroughputParams& params, double phi,
                              const runtime::BatchLimits& explore,
                              const runtime::GoodputPoint& current,
                              const runtime::FloorInputs& floor);
};

runtime::BatchLimits AdaptiveBatch::Impl::limits() const {
  runtime::BatchLimits l;
  l.initial_batch = options.initial_batch;
  l.max_batch = options.max_batch;
  l.min_micro_batch = options.min_micro_batch;
  l.max_micro_batch = options.max_micro_batch;
  l.allow_accumulation = options.accumulation;
  return l;
}

// The shape that runs `global_batch` on this world: the fewest micro-steps whose micro-batch
// fits max_micro_batch.
BatchShape AdaptiveBatch::Impl::shape_for(int64_t global_batch) const {
  const int64_t ranks = context.world_size();
  BatchShape s;
  s.global_batch = std::max<int64_t>(global_batch, ranks * options.min_micro_batch);
  // Without accumulation a rank's share is one micro-batch (a restore at fewer ranks).
  if (!options.accumulation && options.max_micro_batch > 0)
    s.global_batch = std::min(s.global_batch, ranks * options.max_micro_batch);
  const int64_t per_rank = (s.global_batch + ranks - 1) / ranks;
  const int64_t cap = options.max_micro_batch > 0 ? options.max_micro_batch : per_rank;
  s.accum_steps = options.accumulation ? static_cast<int>((per_rank + cap - 1) / cap) : 1;
  s.micro_batch = (per_rank + s.accum_steps - 1) / s.accum_steps;
  return s;
}

runtime::StepShape AdaptiveBatch::Impl::step_shape() const {
  runtime::StepShape s;
  s.nodes = context.nodes();
  s.replicas = context.world_size();
  s.micro_batch = shape.micro_batch;
  s.accum_steps = shape.accum_steps;
  return s;
}

void AdaptiveBatch::Impl::prepare_step() {
  const int64_t next = stats.step;
  dp.measure_gradient_norms(measures(next));
  halved = halvable() && measures(next);
  resplit = halved && shape.accum_steps == 1;
  split_halved = false;  // until split() halves this step (a loop may not call it)
  // Refresh Adam's denominators for the gradients a measurement scales (after the step before
  // them: optimizer.step() has moved the moments).
  if (!preconditioner || !in_measurement(next)) return;
  if (keeps_gradient(next - 1)) return;  // the pair's first gradient was scaled already
  if (preconditioner->inverse.empty() || next < k_preconditioner_warmup ||
      next - preconditioner_step >= k_preconditioner_every) {
    preconditioner->update(optimizer->adam_moments());
    preconditioner_step = next;
  }
}

void AdaptiveBatch::Impl::observe_noise(int64_t samples) {
  const int64_t step = stats.step;
  if (!in_measurement(step)) return;
  // An epoch's short last batch is split unevenly: its norms would not fit the formulas.
  if (samples != shape.global_batch) {
    previous.reset();
    return;
  }
  // Adam's first step has no denominators yet: its raw norms would not mix with the others.
  const runtime::Preconditioner* scale = preconditioner.get();
  if (scale && scale->inverse.empty()) return;
  std::vector<double> local_sqr, total_sqr;
  int count = context.world_size();
  double local_batch = static_cast<double>(shape.global_batch) / count;  // halves: their own
  if (count > 1) {
    dp.synchronize();
    local_sqr = dp.local_gradient_sqr_norms();
    if (local_sqr.empty()) return;
    total_sqr = runtime::grad_sqr_norms(groups, scale);
  } else if (halved) {
    if (!split_halved || !halves.kept()) {
      // The training loop did not train split()'s micro-batches (or did not call accumulated()
      // after the first ones): compare consecutive steps from now on.
      halves_work = false;
      log::warn(
          "adaptive batch: a step measured on two halves of its batch came without the first "
          "half's gradient (train the micro-batches AdaptiveBatch::split returns, calling "
          "backward(loss, last) or accumulated() after each but the last): the noise scale is "
          "measured from consecutive steps instead, which overestimates it at large batches");
      return;
    }
    if (!halves.measure(groups, scale, first_half, samples - first_half, local_sqr, total_sqr,
                        local_batch))
      return;
    count = 2;
  } else {
    // Measured every few steps: the pair is this step and the one before, not an older one.
    if (keeps_gradient(step)) previous.reset();
    if (!previous.measure(groups, scale, local_sqr, total_sqr)) return;
    count = 2;
  }
  if (local_sqr.size() != total_sqr.size()) return;
  // A measurement stands for the steps since the one before.
  noise.observe(local_sqr, total_sqr, local_batch, count, static_cast<double>(measure_period(step)));
}

void AdaptiveBatch::Impl::apply_lr(double factor) {
  std::vector<double> rates = base_lr;
  for (double& rate : rates) rate *= factor;
  optimizer->set_learning_rates(rates);
}

bool AdaptiveBatch::Impl::outlier(double seconds, int64_t micro) const {
  const auto& entries = profile.entries();
  auto found = entries.find({context.nodes(), context.world_size(), micro});
  return found != entries.end() && found->second.optim_count >= 3 &&
         seconds > 4 * found->second.optim_time_sum / found->second.optim_count;
}

bool AdaptiveBatch::Impl::record_time(double seconds) {
  if (!time_this_step) {
    time_this_step = true;
    return false;
  }
  // A step that also evaluated or checkpointed (user code between steps) is not a step time.
  if (outlier(seconds, shape.micro_batch)) return false;
  profile.add_optim(context.nodes(), context.world_size(), shape.micro_batch, seconds);
  return true;
}

bool AdaptiveBatch::Impl::record_resplit_time(double whole, double second_half, int64_t samples) {
  // A resplit step after the shape's first step (its warm-up), not the first at the half size
  // (that size's warm-up), and not stretched by user code between steps (8x: it trains twice
  // the micro-batches of a plain step).
  const bool warm = time_this_step && halves_warm;
  halves_warm = time_this_step;
  if (!warm || (plain_steps >= 3 && whole > 8 * plain_seconds / static_cast<double>(plain_steps)))
    return false;
  const int64_t half = samples - first_half;  // the second half: it took the optimizer step
  if (samples == shape.global_batch && !outlier(second_half, half))
    profile.add_optim(context.nodes(), context.world_size(), half, second_half);
  return true;
}

void AdaptiveBatch::Impl::switch_to(const BatchShape& next, const char* why) {
  if (context.is_main()) {
    log::info("adaptive batch: global {} -> {} (micro-batch {} x {} step(s) on {} rank(s)), {}",
              shape.global_batch, next.global_batch, next.micro_batch, next.accum_steps,
              context.world_size(), why);
  }
  shape = next;
  largest_batch = std::max(largest_batch, shape.global_batch);
  previous.reset();
  time_this_step = false;
  halves_warm = false;
  reset_costs();
}

void AdaptiveBatch::Impl::close_loss_interval(double end) {
  const double sum = loss_sum.defined() && loss_steps > 0 ? loss_sum.item<double>() : 0.0;
  const double loss = loss_steps > 0 ? sum / static_cast<double>(loss_steps) : 0.0;
  if (loss_steps > 0) {
    if (const auto alarm = divergence.observe(loss, shape.global_batch)) {
      // Back to where the loss was lowest (or half this batch, if that was here), and no
      // larger: a smaller batch runs at a smaller scaled rate.
      const int64_t back = alarm->lowest_batch > 0 && alarm->lowest_batch < shape.global_batch
                               ? alarm->lowest_batch
                               : std::max(options.initial_batch, shape.global_batch / 2);
      if (back < shape.global_batch) backoff_cap = back;
      warn_divergence(*alarm);
    }
  }
  if (options.noise_floor && loss_steps > 0 && std::isfinite(loss)) {
    trend.add(interval_begin, end, loss, shape.global_batch);
  } else {
    // An interval without a (finite) loss breaks the trend: nothing older stands for now.
    forget_trend();
    stats.noise_floor = 0;
  }
  // The steps since the last metrics line go on into the next line's mean (a loss that is not
  // finite is not carried: the lines after it would never be).
  if (std::isfinite(sum) && std::isfinite(reported_loss_sum)) {
    reported_loss_sum -= sum;
    reported_loss_steps -= loss_steps;
  } else {
    reported_loss_sum = 0;
    reported_loss_steps = 0;
  }
  loss_sum = at::Tensor();
  loss_steps = 0;
  interval_begin = end;
}

// Said once, on rank 0: nothing stops, and a loss may rise this far for other reasons, but
// the usual cause under AdaptiveBatch is a scaled learning rate beyond what the model takes.
void AdaptiveBatch::Impl::warn_divergence(const runtime::DivergenceWatch::Alarm& alarm) const {
  const std::string since =
      std::isfinite(alarm.loss) && alarm.lowest > 0
          ? fmt::format("{:.0f}x its lowest ({:.4g}, at global batch {})", alarm.loss / alarm.lowest,
                        alarm.lowest, alarm.lowest_batch)
          : std::string("not finite");
  const std::string what_now =
      backoff_cap > 0 ? fmt::format(": going back to global batch {}, and no larger from now on (its checkpoints "
                                    "keep this). Lower the initial learning rate, or max_batch, to avoid it; and check that "
                                    "the loss is the mean over the global batch (summed over the rank's samples "
                                    "times loss_scale()), not a sum that grows with the batch",
                                    backoff_cap)
                      : std::string(": lower the initial learning rate, or max_batch; and check that the loss is the "
                                    "mean over the global batch (summed over the rank's samples times loss_scale()), "
                                    "not a sum that grows with the batch");
  log::warn(
      "adaptive batch: the training loss ({:.4g}) is {}: training may be diverging at global batch "
      "{}, where the learning rate is x{:.2f} the initial one. If it is, the scaled rate is too "
      "high for this model{} (docs/adaptive.md, \"A loss that runs away\")",
      alarm.loss, since, shape.global_batch, stats.lr_factor, what_now);
}

// Per group, the mean of Adam's denominators √v̂ + ε, as the preconditioner last refreshed
// them (floored there); 1 for an optimizer without them; empty before the first refresh. The
// noise scale's variance is weighted by their inverse squared, tr(P²Σ); the floor needs tr(PΣ),
// taken as tr(P²Σ) × this mean (on the examples' MLP the two agree within a factor of 1.3:
// docs/adaptive.md).
std::vector<double> AdaptiveBatch::Impl::adam_denominators() const {
  if (!preconditioner) return std::vector<double>(groups.size(), 1.0);
  if (preconditioner->inverse.empty()) return {};
  // Sums on the device, one host copy for all of them.
  std::vector<at::Tensor> sums;
  std::vector<size_t> group;
  std::vector<double> count(groups.size(), 0.0);
  for (size_t g = 0; g < groups.size(); ++g) {
    for (const auto& p : groups[g]) {
      auto found = preconditioner->inverse.find(p.unsafeGetTensorImpl());
      if (found == preconditioner->inverse.end()) continue;
      sums.push_back(found->second.reciprocal().sum().to(at::kDouble));  // dtypes may differ
      group.push_back(g);
      count[g] += static_cast<double>(found->second.numel());
    }
  }
  std::vector<double> out(groups.size(), 1.0);
  const std::vector<double> values = runtime::to_host(sums);
  std::vector<double> sum(groups.size(), 0.0);
  for (size_t i = 0; i < group.size(); ++i) sum[group[i]] += values[i];
  for (size_t g = 0; g < out.size(); ++g) {
    if (count[g] > 0) out[g] = sum[g] / count[g];
  }
  return out;
}

// The loss the gradient noise holds a global batch at, with the rate the scaling rule gives it.
double AdaptiveBatch::Impl::floor_at(double batch, const std::vector<double>& denominators,
                                     double momentum_gain) const {
  const double scale = batch / static_cast<double>(options.initial_batch);
  const double factor = lr_factor(rule, noise.gain(scale), scale) * momentum_gain;
  double floor = 0;
  for (size_t g = 0; g < base_lr.size() && g < noise.groups(); ++g) {
    floor += runtime::noise_floor(base_lr[g] * factor, noise.var(g) * denominators[g], batch);
  }
  return floor;
}

// What choosing with the noise floor needs now; nullopt when it cannot: turned off, no loss
// observed, no fall rate known at any batch yet, or an adaptive optimizer whose denominators
// the noise scale does not weigh by (RMSprop, Adagrad; Adam under another rule than adam):
// its floor would be tr(Σ) where it needs tr(PΣ), off by the denominators' size.
std::optional<runtime::FloorInputs> AdaptiveBatch::Impl::floor_inputs(
    const runtime::GoodputPoint& current) {
  if (!options.noise_floor || !noise.ready() || !(current.goodput > 0)) return std::nullopt;
  if (optimizer->kind() != OptimizerKind::sgd_like && !preconditioner) return std::nullopt;
  if (const auto fall = trend.fall_rate(shape.global_batch)) {
    fall_rate = *fall;
    fall_goodput = current.goodput;
  } else if (fall_rate < 0 || !(fall_goodput > 0)) {
    return std::nullopt;
  }
  runtime::FloorInputs in;
  // Just after a switch the loss has no trend at the new batch yet: the one measured before,
  // scaled by the goodput the model predicts here against there.
  in.fall_rate = fall_rate * current.goodput / fall_goodput;
  in.current_goodput = current.goodput;
  in.current_batch = current.shape.global_batch();
  // The interval just ended stands for the next one (the budget stretches them).
  in.horizon_steps = static_cast<double>(
      std::max<int64_t>(options.replan_every, stats.step - interval_begin_step));
  const std::vector<double> denominators = adam_denominators();
  if (denominators.size() != groups.size()) return std::nullopt;
  const double gain = optimizer->momentum_gain();
  in.floor_at = [this, denominators, gain](double batch) {
    return floor_at(batch, denominators, gain);
  };
  stats.noise_floor = in.floor_at(static_cast<double>(in.current_batch));
  return in;
}

// What the loss's fall per second decides (noise floor and goodput together): the shape to
// switch to (setting floor_why for the log), or none to stay. When the loss did not fall over
// the last interval (a fall below the noise of the interval means says nothing of how fast the
// current batch progresses), the floor's term alone may still grow the batch: a loss that has
// stopped falling is where a lower floor counts most. If it does not, the verdict is "not
// judged", and goodput decides, growing only (replan()).
AdaptiveBatch::Impl::FloorVerdict AdaptiveBatch::Impl::floor_decision(
    const runtime::ThroughputParams& params, double phi, const runtime::BatchLimits& explore,
    const runtime::GoodputPoint& current, const runtime::FloorInputs& floor) {
  const auto [chosen, value] = runtime::choose_batch_with_floor(
      params, phi, context.nodes(), context.world_size(), explore, efficiency_model, floor);
  if (runtime::should_switch_with_floor(floor, current, value, options.min_improvement)) {
    floor_why = fmt::format(
        "the loss falls {:.3g}/s, predicted {:.3g}/s there (noise floor {:.3g} -> {:.3g})",
        floor.fall_rate, value, stats.noise_floor,
        floor.floor_at(static_cast<double>(chosen.shape.global_batch())));
    return {true, chosen};
  }
  return {floor.fall_rate > 0, std::nullopt};
}

std::pair<int64_t, int64_t> AdaptiveBatch::Impl::cadences(double replan_seconds) const {
  int64_t every = measure_every, interval = options.replan_every;
  const double step = plain_steps > 0      ? plain_seconds / static_cast<double>(plain_steps)
                      : measured_steps > 0 ? measured_seconds / static_cast<double>(measured_steps)
                                           : 0.0;
  if (!(step > 0)) return {every, interval};
  if (measured_steps >= 2 && plain_steps >= 2) {
    // Consecutive steps make a measurement in a world of one that cannot halve its steps.
    const double steps_per_measurement = context.world_size() == 1 && !halvable() ? 2.0 : 1.0;
    const double extra = steps_per_measurement *
                         std::max(0.0, measured_seconds / static_cast<double>(measured_steps) - step);
    const auto needed = static_cast<int64_t>(std::ceil(extra / (k_measure_budget * step)));
    every = std::clamp(needed, options.measure_every,
                       std::max(options.measure_every, k_max_measure_every));
  }
  if (decisions >= k_free_decisions) {
    interval = std::max(interval,
                        static_cast<int64_t>(std::ceil(replan_seconds / (k_replan_budget * step))));
  }
  return {every, interval};
}

void AdaptiveBatch::Impl::replan() {
  // Rank 0 decides (its timings are the profile); everyone applies the same numbers:
  // [0..3] the next shape and its goodput (0: keep it), [4] the measurement cadence, [5] the
  // steps to the next decision.
  std::vector<double> decision(6, 0.0);
  const double started = now();
  const bool after_restore = replan_due;  // the first step since a restore into another world
  if (context.is_main()) {
    if (options.log_every <= 0) take_recent_loss();  // stats().loss without metrics lines
    close_loss_interval(train_seconds);
    if (options.noise_floor && !loss_seen && !warned_no_loss) {
      warned_no_loss = true;
      log::info(
          "adaptive batch: no training loss observed (in C++ backward(loss, last) or observe_loss(loss), "
          "in Python loader.observe_loss(loss), before the step): goodput alone decides, without the "
          "noise floor");
    }
  }
  floor_why.clear();
  if (context.is_main() && !profile.empty()) {
    try {
      const runtime::ThroughputParams params = runtime::fit_throughput(profile);
      const double phi = noise.ready() ? noise.noise_scale() : 0.0;
      publish_model(params, phi);
      const auto current = runtime::evaluate(
          params, phi, static_cast<double>(options.initial_batch), step_shape(), efficiency_model);
      runtime::BatchLimits explore = limits();
      explore.max_batch = std::min(explore.max_batch,
                                   std::max(explore.initial_batch, k_max_growth * largest_batch));
      if (backoff_cap > 0) explore.max_batch = std::min(explore.max_batch, backoff_cap);
      const auto best = runtime::choose_batch(params, phi, context.nodes(), context.world_size(),
                                              explore, efficiency_model);
      const bool forced = replan_due;
      const auto floor = forced ? std::nullopt : floor_inputs(current);
      runtime::GoodputPoint target = best;
      bool switching = forced || runtime::should_switch(current, best, options.min_improvement);
      const FloorVerdict verdict =
          floor ? floor_decision(params, phi, explore, current, *floor) : FloorVerdict{};
      if (verdict.judged) {
        switching = verdict.target.has_value();
        if (switching) target = *verdict.target;
      } else if (options.noise_floor && loss_seen &&
                 best.shape.global_batch() < shape.global_batch) {
        // Goodput decides while the floor cannot judge (no fall measured since the start or a
        // restore, a world of another size, or a loss that did not fall), but it may only grow
        // the batch: a smaller batch raises the floor, which goodput does not count.
        switching = false;
      }
      if (switching) {
        decision[0] = static_cast<double>(target.shape.global_batch());
        decision[1] = static_cast<double>(target.shape.micro_batch);
        decision[2] = static_cast<double>(target.shape.accum_steps);
        decision[3] = target.goodput;
      }
    } catch (const std::exception& e) {
      log::warn("adaptive batch: keeping global batch {}: {}", shape.global_batch, e.what());
    }
  }
  if (context.is_main() && backoff_cap > 0 && shape.global_batch > backoff_cap) {
    const BatchShape back = shape_for(backoff_cap);
    decision[0] = static_cast<double>(back.global_batch);
    decision[1] = static_cast<double>(back.micro_batch);
    decision[2] = static_cast<double>(back.accum_steps);
    decision[3] = 0;
    floor_why = "back to where the training loss was lowest (it ran away above)";
  }
  if (context.is_main()) {
    const auto [every, interval] = cadences(now() - started);
    decision[4] = static_cast<double>(every);
    decision[5] = static_cast<double>(interval);
  }
  context.all_reduce_sum(decision);
  replan_due = false;
  ++decisions;
  if (decision[4] >= 1) measure_every = std::llround(decision[4]);
  stats.measure_every = measure_every;
  next_replan = stats.step + (decision[5] >= 1 ? std::llround(decision[5]) : options.replan_every);
  interval_begin_step = stats.step;
  // The cadence needs the cost of the steps between measurements: decide soon after they begin.
  if (stats.step < k_measure_warmup)
    next_replan = std::min(next_replan, k_measure_warmup + options.replan_every);
  if (decision[0] <= 0) return;
  BatchShape next;
  next.global_batch = static_cast<int64_t>(std::llround(decision[0]));
  next.micro_batch = static_cast<int64_t>(std::llround(decision[1]));
  next.accum_steps = static_cast<int>(std::llround(decision[2]));
  if (next.global_batch == shape.global_batch && next.micro_batch == shape.micro_batch &&
      next.accum_steps == shape.accum_steps) {
    return;
  }
  const std::string why =
      floor_why.empty() ? fmt::format("predicted goodput {:.0f}/s", decision[3]) : floor_why;
  floor_why.clear();
  if (after_restore) {
    // One step (a warm-up) at the old shape in the new world: not an interval worth a line,
    // the next line begins with the new shape (none at this step: it would cover nothing).
    interval_start = now();
    interval_samples = 0;
    logged_step = stats.step;
  } else if (options.log_every > 0 && logged_step != stats.step) {
    log_metrics();  // a line describes one shape: the interval before a switch, the old one
  }
  switch_to(next, why.c_str());
}

void AdaptiveBatch::Impl::publish_model(const runtime::ThroughputParams& params,
                                        double noise_scale) {
  if (!model_file) return;
  runtime::GoodputModel model;
  model.params = params;
  model.noise_scale = noise_scale;
  model.efficiency = efficiency_model;
  model.limits = limits();
  model.compute_timed = false;
  for (const auto& [key, entry] : profile.entries()) {
    const int replicas = std::get<1>(key);
    // As fit_throughput tells them apart: accumulation micro-steps, or synced steps of one replica.
    if (entry.accum_count > 0 || (replicas == 1 && entry.optim_count > 0)) model.compute_timed = true;
    if (std::find(model.measured_replicas.begin(), model.measured_replicas.end(), replicas) ==
        model.measured_replicas.end()) {
      model.measured_replicas.push_back(replicas);
    }
  }
  std::sort(model.measured_replicas.begin(), model.measured_replicas.end());
  model.replicas = context.world_size();
  model.global_batch = shape.global_batch;
  model_file->write(runtime::to_json(model));
}

void AdaptiveBatch::Impl::take_recent_loss() {
  const int64_t steps = loss_steps - reported_loss_steps;
  if (steps <= 0) {
    stats.loss = 0;
    return;
  }
  const double sum = loss_sum.defined() ? loss_sum.item<double>() : 0.0;
  stats.loss = (sum - reported_loss_sum) / static_cast<double>(steps);
  reported_loss_sum = sum;
  reported_loss_steps = loss_steps;
}

void AdaptiveBatch::Impl::log_metrics(std::optional<double> end) {
  const double seconds = end.value_or(now()) - interval_start;
  stats.samples_per_sec = seconds > 0 ? static_cast<double>(interval_samples) / seconds : 0.0;
  stats.efficiency =
      runtime::efficiency(stats.noise_scale, static_cast<double>(options.initial_batch),
                          static_cast<double>(shape.global_batch), efficiency_model);
  stats.goodput = stats.samples_per_sec * stats.efficiency;
  interval_start = now();
  interval_samples = 0;
  logged_step = stats.step;
  take_recent_loss();
  if (!metrics) return;
  metrics->append({{"step", static_cast<double>(stats.step)},
                   {"progress", stats.progress},
                   {"replicas", static_cast<double>(context.world_size())},
                   {"global_batch", static_cast<double>(shape.global_batch)},
                   {"micro_batch", static_cast<double>(shape.micro_batch)},
                   {"accum_steps", static_cast<double>(shape.accum_steps)},
                   {"lr_factor", stats.lr_factor},
                   {"gain", stats.gain},
                   {"samples_per_sec", stats.samples_per_sec},
                   {"seconds", seconds},
                   {"noise_scale", stats.noise_scale},
                   {"grad_sqr", stats.grad_sqr},
                   {"grad_var", stats.grad_var},
                   {"efficiency", stats.efficiency},
                   {"goodput", stats.goodput},
                   {"measure_every", static_cast<double>(measure_every)},
                   {"loss", stats.loss},
                   {"noise_floor", stats.noise_floor}});
}

AdaptiveBatch::AdaptiveBatch(Context context, DataParallel& data_parallel,
                             torch::optim::Optimizer& optimizer, AdaptiveBatchOptions options)
    : AdaptiveBatch(std::move(context), data_parallel, adapt_optimizer(optimizer),
                    std::move(options)) {}

AdaptiveBatch::AdaptiveBatch(Context context, DataParallel& data_parallel,
                             std::shared_ptr<OptimizerAdapter> optimizer,
                             AdaptiveBatchOptions options)
    : m_impl(nullptr) {
  check_options(options, context.world_size());
  m_impl = std::make_unique<Impl>(std::move(context), data_parallel, std::move(optimizer), options);
  Impl& d = *m_impl;
  if (d.options.replan_every == 0) {
    d.options.replan_every = d.context.device().is_cuda() ? k_gpu_replan_every : k_cpu_replan_every;
  }
  d.rule = resolve_rule(d.options.rule, d.optimizer->kind());
  d.efficiency_model = efficiency_for(d.rule, d.optimizer->kind());
  d.groups = d.optimizer->parameter_groups();
  d.base_lr = d.optimizer->learning_rates();
  if (d.groups.empty()) throw ConfigError("AdaptiveBatch: the optimizer has no parameter groups");
  d.noise = runtime::GradientNoiseScale(
      d.groups.size(), static_cast<double>(d.options.initial_batch), d.options.smoothing);
  if (d.optimizer->kind() == OptimizerKind::adam && d.rule == ScalingRule::adam) {
    d.preconditioner = std::make_shared<runtime::Preconditioner>();
    d.preconditioner->update(d.optimizer->adam_moments());  // empty until its first step
  }
  d.dp.track_gradient_norms(d.groups, d.preconditioner);
  d.measure_every = d.stats.measure_every = d.options.measure_every;
  d.next_replan = d.options.replan_every;
  d.interval_begin = d.train_seconds;
  d.shape = d.shape_for(d.options.initial_batch);
  if (d.shape.global_batch != d.options.initial_batch && d.context.is_main()) {
    log::warn("adaptive batch: initial_batch {} starts at {} on {} rank(s) (at least min_micro_batch {} a rank); "
              "the learning rates given are for {} and are scaled for it",
              d.options.initial_batch, d.shape.global_batch, d.context.world_size(), d.options.min_micro_batch,
              d.options.initial_batch);
  }
  d.largest_batch = d.shape.global_batch;
  d.prepare_step();  // after the shape: a world of one's first step may be measured on halves
  if (d.context.is_main() && d.options.log_every > 0) {
    std::string path = d.options.metrics_path;
    if (path.empty() && !d.context.run_dir().empty()) path = d.context.run_dir() + "/metrics.jsonl";
    if (!path.empty()) d.metrics.emplace(path);
  }
  if (d.context.is_main() && !d.context.run_dir().empty()) {
    d.model_file.emplace(d.context.run_dir() + "/" + run_files::k_goodput_model);
  }
}

AdaptiveBatch::~AdaptiveBatch() {
  // The steps since the last metrics line (a stop, a resize, the end of training) get theirs:
  // `dlrun history` missed them, and the last shape and world of a run with them.
  if (!m_impl) return;
  auto& d = *m_impl;
  if (!d.metrics || d.options.log_every <= 0 || d.logged_step == d.stats.step || d.interval_samples <= 0) return;
  // Unwinding (a failed collective, say): reading the loss back could wait on a broken device.
  if (std::uncaught_exceptions() > 0) return;
  try {
    d.log_metrics(d.mark);
  } catch (...) {  // a destructor: what is lost is one line
  }
}

BatchShape AdaptiveBatch::shape() const {
  return m_impl->shape;
}

std::vector<std::vector<int64_t>> AdaptiveBatch::split(const std::vector<int64_t>& indices) const {
  Impl& d = *m_impl;
  const int parts = d.shape.accum_steps;
  const auto n = static_cast<int64_t>(indices.size());
  // A new step (a step left half-way, as a Python loop may, leaves nothing behind).
  d.split_halved = false;
  d.half_parts_done = 0;
  d.halves.reset();
  std::vector<std::vector<int64_t>> out;
  if (d.resplit && n >= 2) {
    // Two micro-batches of half the step each (an epoch's short last batch is not measured).
    const auto [begin, middle] = ElasticSampler::share(n, 0, 2);
    out.emplace_back(indices.begin() + begin, indices.begin() + middle);
    out.emplace_back(indices.begin() + middle, indices.end());
    d.split_halved = true;
    d.first_half = middle - begin;
    d.first_half_parts = 1;
    return out;
  }
  out.reserve(static_cast<size_t>(parts));
  for (int i = 0; i < parts; ++i) {
    auto [begin, end] = ElasticSampler::share(n, i, parts);
    out.emplace_back(indices.begin() + begin, indices.begin() + end);
  }
  if (d.halved && !d.resplit && parts >= 2) {
    // Several micro-batches: the first half of them against the rest.
    d.first_half_parts = parts / 2;
    d.first_half = 0;
    for (int i = 0; i < d.first_half_parts; ++i) d.first_half += static_cast<int64_t>(out[i].size());
    d.split_halved = d.first_half >= 1 && n - d.first_half >= 1;
  }
  return out;
}

void AdaptiveBatch::observe_loss(const at::Tensor& loss) {
  Impl& d = *m_impl;
  if (!d.context.is_main() || !loss.defined() || loss.numel() != 1) return;
  const at::Tensor value = loss.detach().reshape({});
  if (d.loss_sum.defined()) {
    // A value given as a number (Python) sums on the CPU beside a device's losses.
    d.loss_sum.add_(value.device() == d.loss_sum.device() ? value : value.to(d.loss_sum.device()));
  } else {
    d.loss_sum = value.to(at::kDouble).clone();
  }
  d.loss_this_step = true;
  d.loss_seen = true;
}

void AdaptiveBatch::backward(const at::Tensor& loss, bool last) {
  observe_loss(loss);
  if (last) {
    m_impl->dp.backward(loss);
    return;
  }
  {
    auto guard = m_impl->dp.no_sync();
    m_impl->dp.backward(loss);
  }
  accumulated();
}

void AdaptiveBatch::accumulated() {
  // Forward + backward of an accumulated micro-batch (the forward ran before this call).
  Impl& d = *m_impl;
  if (d.split_halved && ++d.half_parts_done == d.first_half_parts) d.halves.keep(d.groups);
  const double seconds = m_impl->now() - m_impl->mark;
  if (m_impl->time_this_step && !d.resplit) {
    m_impl->profile.add_accum(m_impl->context.nodes(), m_impl->context.world_size(),
                              m_impl->shape.micro_batch, seconds);
  }
  m_impl->mark = m_impl->now();
}

void AdaptiveBatch::step(int64_t samples) {
  Impl& d = *m_impl;
  if (samples < 0) samples = d.shape.global_batch;
  if (samples > d.shape.global_batch) {
    throw ConfigError(fmt::format(
        "AdaptiveBatch::step: this step trained {} samples, more than the global batch AdaptiveBatch chose ({}): "
        "take each step's batch with sampler.next(adaptive.global_batch()); the learning rate is scaled for that "
        "batch",
        samples, d.shape.global_batch));
  }
  d.short_steps = samples < d.shape.global_batch ? d.short_steps + 1 : 0;
  if (d.short_steps >= 3 && !d.short_said) {
    d.short_said = true;
    log::warn("AdaptiveBatch: {} steps in a row trained fewer samples than the global batch it chose (this one {}, "
              "not {}): does the loop take each step's batch with sampler.next(adaptive.global_batch())? The "
              "learning rate is scaled for the batch chosen, and only an epoch's last step is short",
              d.short_steps, samples, d.shape.global_batch);
  }
  const double noise_start = d.resplit ? d.now() : 0.0;  // left out of a half's time
  d.observe_noise(samples);
  const double noise_seconds = d.resplit ? d.now() - noise_start : 0.0;
  const double scale = d.refresh_noise_stats();
  d.apply_lr(d.stats.lr_factor);
  d.dp.step([&d] { d.optimizer->step(); });
  const double end = d.now();
  const double seconds = end - d.mark;
  // A resplit step costs the whole of it (both halves: what measuring costs); the others their
  // last micro-batch, as the profile has them.
  const bool resplit = d.resplit && d.split_halved;
  const double cost = resplit ? end - d.step_start : seconds;
  const bool timed = resplit ? d.record_resplit_time(cost, seconds - noise_seconds, samples)
                             : d.record_time(seconds);
  if (!timed) {
    // Not a step time: counted for neither, nor on the loss trend's clock.
  } else if (d.in_measurement(d.stats.step)) {
    d.measured_seconds += cost;
    ++d.measured_steps;
  } else {
    d.plain_seconds += cost;
    ++d.plain_steps;
  }
  if (timed) d.train_seconds += cost;
  d.stats.progress += runtime::step_worth(d.efficiency_model, d.stats.gain, scale);
  ++d.stats.step;
  if (d.loss_this_step) ++d.loss_steps;
  d.loss_this_step = false;
  d.interval_samples += samples;
  if (d.replan_due || d.stats.step >= d.next_replan) d.replan();
  if (d.log_due()) d.log_metrics();
  // Refreshing Adam's denominators before a measurement is part of what it costs: it is
  // timed with the next step.
  d.mark = d.step_start = d.now();
  d.prepare_step();
}

double AdaptiveBatch::progress() const {
  return m_impl->stats.progress;
}
const AdaptiveStats& AdaptiveBatch::stats() const {
  return m_impl->stats;
}
void AdaptiveBatch::set_base_lr(double lr) {
  for (double& base : m_impl->base_lr) base = lr;
}
std::vector<double> AdaptiveBatch::base_lrs() const {
  return m_impl->base_lr;
}
void AdaptiveBatch::set_base_lrs(const std::vector<double>& lrs) {
  if (lrs.size() != m_impl->base_lr.size()) {
    throw ConfigError(fmt::format("AdaptiveBatch: {} learning rates for {} parameter groups", lrs.size(),
                                  m_impl->base_lr.size()));
  }
  m_impl->base_lr = lrs;
}

std::string AdaptiveBatch::checkpoint_state() const {
  const Impl& d = *m_impl;
  runtime::AdaptiveState s;
  s.global_batch = d.shape.global_batch;
  s.world_size = d.context.world_size();
  s.step = d.stats.step;
  s.progress = d.stats.progress;
  s.base_lr = d.base_lr;
  s.batch_cap = d.backoff_cap;
  s.fall_rate = d.fall_rate;
  s.fall_goodput = d.fall_goodput;
  s.noise = d.noise.serialize();
  s.profile = d.profile.serialize();
  return runtime::format_adaptive_state(s);
}

void AdaptiveBatch::restore_checkpoint_state(const std::string& text) {
  Impl& d = *m_impl;
  const runtime::AdaptiveState s = runtime::parse_adaptive_state(text);
  if (s.base_lr.size() != d.base_lr.size()) {
    throw ConfigError(
        fmt::format("AdaptiveBatch: the checkpoint has {} parameter groups, this optimizer {}",
                    s.base_lr.size(), d.base_lr.size()));
  }
  d.noise.deserialize(s.noise);
  d.profile.deserialize(s.profile);
  d.base_lr = s.base_lr;
  d.stats.step = s.step;
  d.stats.progress = s.progress;
  // Within this run's limits (lowered on resume, after an out-of-memory error say), and below
  // where the loss ran away before.
  d.backoff_cap = s.batch_cap;
  d.shape = d.shape_for(std::min({s.global_batch, d.options.max_batch,
                                  d.backoff_cap > 0 ? d.backoff_cap : s.global_batch}));
  if (d.shape.global_batch != s.global_batch && d.context.is_main()) {
    log::warn("adaptive batch: the checkpoint's global batch {} does not fit this run's limits: going on at {}",
              s.global_batch, d.shape.global_batch);
  }
  d.largest_batch = d.shape.global_batch;
  d.previous.reset();
  d.halves.reset();
  d.halved = d.split_halved = false;
  d.time_this_step = false;
  d.halves_warm = false;
  // Another world: the best shape for the new rank count may differ; decide at the next step.
  d.replan_due = s.world_size != d.context.world_size();
  d.preconditioner_step = -1;
  d.measure_every = d.stats.measure_every = d.options.measure_every;
  d.next_replan = d.stats.step + d.options.replan_every;
  d.reset_costs();
  d.forget_trend();
  // The loss's last fall stands for now until one is measured here (scaled by the goodput the
  // model predicts now against then, as after a switch): without it the floor could not judge
  // for two decision intervals at one batch, and goodput alone grew the batch meanwhile.
  d.fall_rate = s.fall_rate;
  d.fall_goodput = s.fall_goodput;
  d.divergence.forget();
  d.loss_sum = at::Tensor();
  d.loss_steps = 0;
  d.loss_this_step = false;
  d.reported_loss_sum = 0;
  d.reported_loss_steps = 0;
  d.loss_seen = false;
  d.interval_begin_step = d.stats.step;
  d.interval_begin = d.train_seconds;
  d.interval_start = d.now();  // the first line's seconds: from here, not the construction
  d.interval_samples = 0;
  // What the checkpoint knows, readable before the first step (stats() read 0 for the noise
  // scale and 1 for the gain until then, and the efficiency until the first metrics line).
  d.refresh_noise_stats();
  d.stats.efficiency = runtime::efficiency(d.stats.noise_scale, static_cast<double>(d.options.initial_batch),
                                           static_cast<double>(d.shape.global_batch), d.efficiency_model);
  d.prepare_step();
}

}  // namespace dlrun
