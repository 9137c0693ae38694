// Allreduce of 4/16/64 MB of fp32 across the ranks: through the runtime (DataParallel's
// buckets: step time with sync minus step time without, on a model whose backward is a
// trivial fill) against a raw c10d ProcessGroupGloo allreduce of the same bytes.
// Run by bench/runtime.sh under `dlrun local --nproc 2`; rank 0 prints one line per size.

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <vector>

#include <torch/csrc/distributed/c10d/PrefixStore.hpp>
#include <torch/csrc/distributed/c10d/ProcessGroupGloo.hpp>
#include <torch/csrc/distributed/c10d/TCPStore.hpp>
#include <torch/nn/module.h>
#include <torch/optim/sgd.h>

#include "dlrun/runtime.hpp"

namespace {

struct Flat : torch::nn::Module {
  torch::Tensor w;
  explicit Flat(int64_t n) { w = register_parameter("w", torch::zeros({n})); }
};

template <typename F>
double time_ms(F&& f) {
  auto start = std::chrono::steady_clock::now();
  f();
  return std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - start).count();
}

}  // namespace

int main(int argc, char** argv) {
  int runs = argc > 1 ? std::atoi(argv[1]) : 15;
  auto ctx = dlrun::init();
  // A raw Gloo group beside the runtime's, on the next port.
  c10d::TCPStoreOptions store_options;
  store_options.port = static_cast<uint16_t>(std::atoi(std::getenv("MASTER_PORT")) + 1);
  store_options.isServer = ctx.rank() == 0;
  store_options.numWorkers = ctx.world_size();
  auto store = c10::make_intrusive<c10d::TCPStore>(std::getenv("MASTER_ADDR"), store_options);
  auto gloo_options = c10d::ProcessGroupGloo::Options::create();
  gloo_options->devices.push_back(c10d::ProcessGroupGloo::createDeviceForHostname("127.0.0.1"));
  gloo_options->threads = 2;
  auto raw = c10::make_intrusive<c10d::ProcessGroupGloo>(c10::make_intrusive<c10d::PrefixStore>("raw", store),
                                                          ctx.rank(), ctx.world_size(), gloo_options);
  for (int64_t mb : {4, 16, 64}) {
    int64_t n = mb * 1024 * 1024 / 4;
    auto model = std::make_shared<Flat>(n);
    dlrun::DataParallel dp(model, ctx);
    torch::optim::SGD sgd(model->parameters(), torch::optim::SGDOptions(0.0));
    auto step = [&](bool sync) {
      sgd.zero_grad();
      auto loss = (model->w * 0).sum();
      if (sync) {
        dp.backward(loss);
      } else {
        auto guard = dp.no_sync();
        dp.backward(loss);
      }
      dp.step(sgd);
    };
    // Sync and no-sync steps alternate, and the allreduce's cost is the median of their
    // differences: slow drifts of a shared machine cancel out.
    std::vector<at::Tensor> tensors = {torch::ones({n})};
    std::vector<double> synced, unsynced, diffs, raws;
    for (int i = 0; i < runs + 3; ++i) {
      const double a = time_ms([&] { step(true); }), b = time_ms([&] { step(false); });
      const double r = time_ms([&] { raw->allreduce(tensors)->wait(); });
      if (i < 3) continue;
      synced.push_back(a);
      unsynced.push_back(b);
      diffs.push_back(a - b);
      raws.push_back(r);
    }
    auto median = [](std::vector<double> v) {
      std::sort(v.begin(), v.end());
      return v[v.size() / 2];
    };
    const double with_sync = median(synced), without = median(unsynced), raw_ms = median(raws);
    if (ctx.is_main()) {
      std::printf("allreduce %3lld MB ranks=%d runtime_ms=%.1f (step %.1f - no-sync step %.1f) raw_gloo_ms=%.1f ratio=%.2f\n",
                  static_cast<long long>(mb), ctx.world_size(), median(diffs), with_sync, without, raw_ms,
                  median(diffs) / raw_ms);
      std::fflush(stdout);
    }
  }
  ctx.barrier();
  return 0;
}
