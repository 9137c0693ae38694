#pragma once
// DataParallel: makes one model replica per rank train as one model. At construction every
// rank checks that its parameters match rank 0's in number and shape, then takes rank 0's
// parameters and buffers (so all ranks start from the same weights). backward() runs
// loss.backward() while LibTorch's DDP engine (c10d::Reducer) copies gradients into buckets
// (~25 MB, in reverse registration order, re-ordered after the first step to the order
// gradients actually become ready) and starts each bucket's allreduce from the autograd
// hooks as soon as it is full, so communication overlaps the rest of backward. After
// backward() every rank holds the gradient averaged over all ranks. The stop flags of all
// ranks travel with the last bucket (docs/runtime.md), so step() lets every rank see
// Context::stop_requested() after the same step.
//
// Ownership: shares the module (and keeps the Context); the optimizer stays the caller's.
// Thread-safety: one training thread. The module must not change its parameters' shapes.
//
//   dlrun::DataParallel dp(model.ptr(), ctx);
//   auto loss = ...;  dp.backward(loss);  dp.step(optimizer);  optimizer.zero_grad();
//   { auto guard = dp.no_sync(); dp.backward(loss1); }  dp.backward(loss2);  // accumulate

#include <cstdint>
#include <functional>
#include <memory>
#include <vector>

#include "dlrun/context.hpp"

namespace at {
class Tensor;
}
namespace torch::nn {
class Module;
}
namespace torch::optim {
class Optimizer;
}
namespace dlrun::runtime {
struct Preconditioner;
}

namespace dlrun {

struct DataParallelOptions {
  // Bucket size for gradients, as PyTorch DDP's bucket_cap_mb (25 MiB).
  int64_t bucket_cap_bytes = 25 * 1024 * 1024;
  // The first bucket (the last layers' gradients) is smaller, so communication starts early.
  int64_t first_bucket_cap_bytes = 1024 * 1024;
};

class DataParallel {
 public:
  DataParallel(std::shared_ptr<torch::nn::Module> module, Context context,
               DataParallelOptions options = {});
  // For a model that is not a torch::nn::Module (Python's, through the dlrun module): its
  // parameters in registration order (those that do not require gradients are not reduced)
  // and its buffers, both taken from rank 0 at construction as above.
  DataParallel(const std::vector<at::Tensor>& parameters, const std::vector<at::Tensor>& buffers,
               Context context, DataParallelOptions options = {});
  ~DataParallel();
  DataParallel(const DataParallel&) = delete;
  DataParallel& operator=(const DataParallel&) = delete;

  // loss.backward(); unless inside no_sync(), gradients are averaged over all ranks by the
  // time it returns. Every rank must call it the same number of times with sync on.
  void backward(const at::Tensor& loss);
  // Waits until the last backward()'s gradient allreduce and stop vote are done. step() calls
  // it; call it earlier to look at the averaged gradients before the optimizer does.
  // Idempotent: a second call before the next backward() returns at once.
  void synchronize();
  // synchronize(), optimizer.step(), then records whether all ranks agreed to stop
  // (Context::stop_requested).
  void step(torch::optim::Optimizer& optimizer);
  // The same around any optimizer's step (AdaptiveBatch's OptimizerAdapter).
  void step(const std::function<void()>& optimizer_step);
  // The two halves of backward() and step() for a caller that runs loss.backward() and the
  // optimizer's step itself (the Python module): prepare_backward() before the forward pass
  // whose loss is reduced (collective, like backward()), and finish_step() after
  // synchronize() and the optimizer step: it records the stop vote as step() does.
  void prepare_backward();
  void finish_step();

  // Gradient statistics for the gradient noise scale (AdaptiveBatch turns them on). With
  // groups given (each a list of parameters of this module, e.g. an optimizer's param groups),
  // every synced backward also takes the squared norm of this rank's own gradient of each
  // group before it is averaged; the norms travel in the stop vote's allreduce (no extra
  // round trip). Costs one pass over the gradients per step; off by default. The
  // preconditioner (internal, runtime/src/gradient_norms.hpp) makes them norms of the gradient
  // as an adaptive optimizer scales it.
  void track_gradient_norms(
      const std::vector<std::vector<at::Tensor>>& groups,
      std::shared_ptr<const runtime::Preconditioner> preconditioner = nullptr);
  // Whether the next synced backward takes those norms (default on once tracked): off, the
  // step costs what an untracked one does. Set it before the step's backward, the same on
  // every rank.
  void measure_gradient_norms(bool on);
  // After synchronize(): per group, the mean over the ranks of |local gradient|² of the last
  // synced step. Empty in a world of one, when not tracked, or when that step did not measure.
  std::vector<double> local_gradient_sqr_norms() const;

  // While the guard lives, backward() only accumulates local gradients (gradient
  // accumulation); the next backward() outside it reduces the accumulated sum.
  class NoSyncGuard {
   public:
    explicit NoSyncGuard(DataParallel& owner);
    ~NoSyncGuard();
    NoSyncGuard(const NoSyncGuard&) = delete;
    NoSyncGuard& operator=(const NoSyncGuard&) = delete;

   private:
    DataParallel& m_owner;
    bool m_previous;
  };
  NoSyncGuard no_sync() { return NoSyncGuard(*this); }

  // Number of gradient buckets (0 for a world of one: nothing to reduce).
  size_t bucket_count() const;
  const Context& context() const;

 private:
  struct Impl;
  std::unique_ptr<Impl> m_impl;
};

}  // namespace dlrun
