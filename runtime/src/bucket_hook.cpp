#include "bucket_hook.hpp"

#include "context_state.hpp"

namespace dlrun::runtime {

BucketHook::BucketHook(c10::intrusive_ptr<c10d::ProcessGroup> group, ContextState& state,
                       std::shared_ptr<StopVote> vote)
    : m_group(std::move(group)), m_state(state), m_vote(std::move(vote)) {}

c10::intrusive_ptr<c10::ivalue::Future> BucketHook::runHook(c10d::GradBucket& bucket) {
  // Divide before summing (as DDP's allreduce hook does) to keep fp16 buckets in range.
  std::vector<at::Tensor> tensors{bucket.getBufferRef().div_(m_state.world_size)};
  auto future = m_group->allreduce(tensors)->getFuture();
  if (bucket.isLast()) {
    // NCCL reduces device tensors only: keep the flag where the gradients are.
    const auto& buffer = bucket.getBuffer();
    if (m_vote->flag.device() != buffer.device()) {
      m_vote->flag = at::zeros({1}, buffer.options().dtype(at::kFloat));
    }
    m_vote->flag.fill_(m_state.local_stop_pending() ? 1.0 : 0.0);
    std::vector<at::Tensor> flag{m_vote->flag};
    m_vote->work = m_group->allreduce(flag);
  }
  return future;
}

at::Tensor BucketHook::parseHookResult(const c10::IValue& result) {
  if (result.isTensor()) return result.toTensor();
  return result.toTensorVector().at(0);
}

}  // namespace dlrun::runtime
