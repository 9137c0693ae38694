#include "bucket_hook.hpp"

#include "context_state.hpp"
#include "gradient_norms.hpp"
#include "serial_worker.hpp"
#include "shm_allreduce.hpp"

namespace dlrun::runtime {
namespace {

// Sums `tensor` (float, CPU, contiguous) over the ranks through shared memory on the worker
// thread, scaled; the future completes with the tensor, or with the error.
c10::intrusive_ptr<c10::ivalue::Future> shm_allreduce(ContextState& state, at::Tensor tensor,
                                                      float scale) {
  auto future = c10::make_intrusive<c10::ivalue::Future>(c10::TensorType::get());
  state.shm_worker->submit([shm = state.shm, tensor, scale, future]() {
    try {
      shm->allreduce(tensor.data_ptr<float>(), static_cast<size_t>(tensor.numel()), scale);
      future->markCompleted(c10::IValue(tensor));
    } catch (...) {
      future->setError(std::current_exception());
    }
  });
  return future;
}

}  // namespace

BucketHook::BucketHook(c10::intrusive_ptr<c10d::ProcessGroup> group, ContextState& state,
                       std::shared_ptr<StepVote> vote)
    : m_group(std::move(group)), m_state(state), m_vote(std::move(vote)) {}

c10::intrusive_ptr<c10::ivalue::Future> BucketHook::runHook(c10d::GradBucket& bucket) {
  // The local norms must be taken before the allreduce overwrites the buffer.
  if (m_vote->groups > 0 && m_vote->measure) add_local_norms(bucket);
  at::Tensor& buffer = bucket.getBufferRef();
  if (use_shm(buffer)) {
    auto future = shm_allreduce(m_state, buffer, 1.0f / static_cast<float>(m_state.world_size));
    if (bucket.isLast()) start_vote(buffer);
    return future;
  }
  // Divide before summing (as DDP's allreduce hook does) to keep fp16 buckets in range.
  std::vector<at::Tensor> tensors{bucket.getBufferRef().div_(m_state.world_size)};
  auto future = m_group->allreduce(tensors)->getFuture();
  if (bucket.isLast()) start_vote(bucket.getBuffer());
  return future;
}

void BucketHook::add_local_norms(c10d::GradBucket& bucket) {
  auto& sums = m_vote->local_sqr;
  if (bucket.getIndex() == 0 || sums.size() != m_vote->groups) {
    // Buckets run in index order: the first one of a step starts the sums afresh.
    sums.assign(m_vote->groups, at::zeros({}, bucket.getBuffer().options().dtype(at::kFloat)));
  }
  const Preconditioner* preconditioner = m_vote->preconditioner.get();
  if (preconditioner && preconditioner->inverse.empty()) preconditioner = nullptr;
  if (m_vote->groups == 1 && !preconditioner) {
    const at::Tensor flat = bucket.getBuffer().to(at::kFloat);
    sums[0] = sums[0] + at::dot(flat, flat);
    return;
  }
  const std::vector<at::Tensor> grads = bucket.getGradients();
  const std::vector<at::Tensor> params = bucket.getParameters();
  for (size_t i = 0; i < grads.size(); ++i) {
    auto found = m_vote->group_of.find(params[i].unsafeGetTensorImpl());
    if (found == m_vote->group_of.end()) continue;  // not in any optimizer group
    sums[found->second] =
        sums[found->second] +
        (preconditioner ? preconditioner->sqr_norm(params[i], grads[i]) : sqr_norm(grads[i]));
  }
}

void BucketHook::start_vote(const at::Tensor& buffer) {
  // NCCL reduces device tensors only: keep the values where the gradients are.
  const auto options = buffer.options().dtype(at::kFloat);
  const float flag = m_state.local_stop_pending() ? 1.0f : 0.0f;
  // Every rank's first vote is the same step's: all add the check, or (too many ranks) none.
  m_vote->carries_check = m_vote->check_samplers && m_state.world_size <= k_sampler_check_most_ranks;
  m_vote->check_samplers = false;
  if (m_vote->carries_check) {
    // One slot per group whether this rank measures this step or not: ranks at different steps
    // (one restored another checkpoint: what the check is for) must still send votes of one length.
    std::vector<at::Tensor> parts{at::full({1}, flag, options)};
    m_vote->check_has_norms = m_vote->groups > 0 && m_vote->measure && m_vote->local_sqr.size() == m_vote->groups;
    if (m_vote->check_has_norms) {
      for (const auto& sum : m_vote->local_sqr) parts.push_back(sum.reshape({1}));
    } else if (m_vote->groups > 0) {
      parts.push_back(at::zeros({static_cast<int64_t>(m_vote->groups)}, options));
    }
    m_vote->checked_take = m_state.last_take;
    const std::vector<float> slots = sampler_agreement_slots(m_vote->checked_take);
    parts.push_back(at::tensor(slots, at::TensorOptions().dtype(at::kFloat)).to(options.device()));
    m_vote->values = at::cat(parts);
  } else if (m_vote->groups == 0 || !m_vote->measure) {
    if (m_vote->values.device() != buffer.device() || m_vote->values.numel() != 1) {
      m_vote->values = at::zeros({1}, options);
    }
    m_vote->values.fill_(flag);
  } else {
    std::vector<at::Tensor> parts{at::full({1}, flag, options)};
    for (const auto& sum : m_vote->local_sqr) parts.push_back(sum.reshape({1}));
    m_vote->values = at::cat(parts);
  }
  m_vote->pending = true;
  if (use_shm(m_vote->values)) {
    m_vote->shm_done = shm_allreduce(m_state, m_vote->values, 1.0f);
    return;
  }
  std::vector<at::Tensor> values{m_vote->values};
  m_vote->work = m_group->allreduce(values);
}

bool BucketHook::use_shm(const at::Tensor& buffer) const {
  return m_state.shm && m_state.shm_worker && buffer.device().is_cpu() &&
         buffer.scalar_type() == at::kFloat && buffer.is_contiguous();
}

at::Tensor BucketHook::parseHookResult(const c10::IValue& result) {
  if (result.isTensor()) return result.toTensor();
  return result.toTensorVector().at(0);
}

}  // namespace dlrun::runtime
