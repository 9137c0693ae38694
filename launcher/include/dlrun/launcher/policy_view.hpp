#pragma once
// What the goodput policy (goodput_policy.hpp) would give the queue's GPU jobs now, and why:
// each job's predicted speedup over its fair share, from the goodput model its runtime
// published (RUN_DIR/goodput-model.json) or the neutral prediction without one. `dlrun
// status` shows it beside each job's allocation (docs/scheduling.md). Reads the model files;
// otherwise pure.

#include <cstdint>
#include <map>
#include <vector>

#include "dlrun/launcher/goodput_policy.hpp"
#include "dlrun/launcher/job_store.hpp"

namespace dlrun::launcher {

struct PolicyView {
  int gpus = 0;          // what the policy would give
  double speedup = 0;    // predicted speedup at that, over the fair share
  bool modelled = false; // from a published model (else the neutral prediction)
};

// The predicted goodput at 0 … max_gpus GPUs from RUN_DIR/goodput-model.json; empty when
// the job published none (or it cannot be read).
std::vector<double> published_goodput(const std::string& run_dir, int max_gpus);

// For the pending and running GPU jobs on this machine (not Slurm's, not ssh ones), keyed by
// id; empty when there are none or the machine has no GPU.
std::map<int64_t, PolicyView> policy_view(const std::vector<JobRecord>& jobs, int gpu_capacity, double now,
                                          PolicySettings settings = {});

}  // namespace dlrun::launcher
