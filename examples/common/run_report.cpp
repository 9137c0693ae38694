#include "run_report.hpp"

#include <fmt/format.h>

#include <cstdio>
#include <exception>
#include <string>

namespace examples {

std::string checkpoint_dir(const std::string& option, const dlrun::Context& ctx) {
  return option.empty() ? ctx.checkpoint_dir() : option;
}

void print_resumed(const dlrun::Context& ctx, const dlrun::CheckpointInfo& info,
                   const dlrun::ElasticSampler& sampler, const std::string& extra) {
  if (!ctx.is_main()) return;
  fmt::print(
      "resumed from step {} (epoch {}, sample {} of {}{}) saved by {} rank(s); now {} rank(s)\n",
      info.step, sampler.epoch() + 1, sampler.position(), sampler.dataset_size(), extra,
      info.saved_world_size, ctx.world_size());
  std::fflush(stdout);  // a pipe is block-buffered: let a watcher see the resume now
}

void print_stopped(const dlrun::Context& ctx, int64_t step, const dlrun::ElasticSampler& sampler) {
  if (!ctx.is_main()) return;
  fmt::print("stopped after step {} (epoch {}, sample {} of {}): checkpoint saved, exit {}\n", step,
             sampler.epoch() + 1, sampler.position(), sampler.dataset_size(), ctx.exit_code());
}

std::string adaptive_summary(const dlrun::AdaptiveBatch& adaptive) {
  const auto shape = adaptive.shape();
  const auto& stats = adaptive.stats();
  // 0 until the first measurement (a run of one step has none); at its ceiling when the mean
  // gradient is lost in its noise.
  const std::string noise = stats.noise_unbounded() ? std::string("unbounded")
                            : stats.noise_scale > 0 ? fmt::format("{:.0f}", stats.noise_scale)
                                                    : std::string("not measured yet");
  return fmt::format(", batch {} ({} x {} per rank), noise scale {}, lr x{:.2f}",
                     shape.global_batch, shape.micro_batch, shape.accum_steps, noise,
                     stats.lr_factor);
}

int run_main(const char* program, const std::function<int()>& body) {
  try {
    return body();
  } catch (const dlrun::Error& e) {
    std::fprintf(stderr, "%s: error: %s\n", program, e.what());
    return e.exit_code();
  } catch (const std::exception& e) {
    std::fprintf(stderr, "%s: error: %s\n", program, e.what());
    return 1;
  }
}

}  // namespace examples
