#pragma once
// The communication hook DataParallel installs in c10d::Reducer: averages each gradient
// bucket over the ranks, and with the last bucket of a step also sends this rank's stop
// flag (a small allreduce issued right behind the bucket's), so the stop vote costs no extra
// round trip at the end of the step. When gradient statistics are on (AdaptiveBatch's noise
// scale), the hook also takes the squared norm of this rank's local gradient in each bucket,
// per parameter group, before the bucket is averaged, and those norms ride in the same
// small allreduce as the stop flag. When every rank is on this host and the bucket is a CPU
// float tensor, the bucket and the vote are summed through shared memory (shm_allreduce.hpp)
// on the context's SerialWorker thread, whose future the hook returns. Internal. Used from the
// autograd thread.

#include <memory>
#include <torch/csrc/distributed/c10d/comm.hpp>
#include <unordered_map>
#include <vector>

#include "sampler_agreement.hpp"

namespace dlrun::runtime {

struct ContextState;
struct Preconditioner;

// The vote of the step in flight: started by the hook, finished by DataParallel::synchronize().
// values = [stop flag, |local gradient|² of group 0, group 1, …], summed over the ranks; the
// first vote adds the sampler check's slots at the end (sampler_agreement.hpp).
struct StepVote {
  at::Tensor values = at::zeros({1}, at::kFloat);
  c10::intrusive_ptr<c10d::Work> work;  // the vote's allreduce, when Gloo carries it
  bool pending = false;                 // a vote was cast this step and is not read yet
  bool check_samplers = true;           // the next vote carries the sampler check (the first)
  bool carries_check = false;           // the vote in flight carries it, after one slot per group
  bool check_has_norms = false;         // … and those slots are this step's norms (else zeros)
  SamplerTake checked_take;             // what this rank's slots of the check say
  c10::intrusive_ptr<c10::ivalue::Future> shm_done;  // the vote's, when shared memory carries it

  // Gradient statistics: off while groups == 0, and for the steps where measure is false.
  size_t groups = 0;
  bool measure = true;
  std::unordered_map<const c10::TensorImpl*, size_t> group_of;  // parameter → group
  std::vector<at::Tensor> local_sqr;  // this step's partial sums, one 0-d tensor per group
  std::shared_ptr<const Preconditioner> preconditioner;  // Adam's: norms of g / (√v̂ + ε)
};

class BucketHook : public c10d::CommHookInterface {
 public:
  BucketHook(c10::intrusive_ptr<c10d::ProcessGroup> group, ContextState& state,
             std::shared_ptr<StepVote> vote);
  c10::intrusive_ptr<c10::ivalue::Future> runHook(c10d::GradBucket& bucket) override;
  at::Tensor parseHookResult(const c10::IValue& result) override;

 private:
  void add_local_norms(c10d::GradBucket& bucket);
  void start_vote(const at::Tensor& buffer);
  bool use_shm(const at::Tensor& buffer) const;

  c10::intrusive_ptr<c10d::ProcessGroup> m_group;
  ContextState& m_state;
  std::shared_ptr<StepVote> m_vote;
};

}  // namespace dlrun::runtime
