#pragma once
// The communication hook DataParallel installs in c10d::Reducer: averages each gradient
// bucket over the ranks, and with the last bucket of a step also sends this rank's stop
// flag (a one-element allreduce issued right behind the bucket's), so the stop vote costs no
// extra round trip at the end of the step. Internal. Used from the autograd thread.

#include <memory>
#include <torch/csrc/distributed/c10d/comm.hpp>

namespace dlrun::runtime {

struct ContextState;

// The vote of the step in flight: started by the hook, finished by DataParallel::step().
struct StopVote {
  at::Tensor flag = at::zeros({1}, at::kFloat);
  c10::intrusive_ptr<c10d::Work> work;  // null when no vote is in flight
};

class BucketHook : public c10d::CommHookInterface {
 public:
  BucketHook(c10::intrusive_ptr<c10d::ProcessGroup> group, ContextState& state,
             std::shared_ptr<StopVote> vote);
  c10::intrusive_ptr<c10::ivalue::Future> runHook(c10d::GradBucket& bucket) override;
  at::Tensor parseHookResult(const c10::IValue& result) override;

 private:
  c10::intrusive_ptr<c10d::ProcessGroup> m_group;
  ContextState& m_state;
  std::shared_ptr<StopVote> m_vote;
};

}  // namespace dlrun::runtime
