#pragma once
// The goodput policy (goodput_policy.hpp) over the job queue: each active local GPU job as
// the policy sees it (policy_input: its MIN:MAX, its allocation, since when it has it, whether
// it may be resized, its predicted goodput from the model its runtime published in
// RUN_DIR/goodput-model.json), and what the policy would give each job now, and why
// (policy_view: `dlrun status` shows it beside each job's allocation; the scheduler acts on
// the same decision; docs/scheduling.md). Reads the run directories' files; otherwise pure.

#include <cstdint>
#include <map>
#include <optional>
#include <vector>

#include "dlrun/launcher/goodput_policy.hpp"
#include "dlrun/launcher/job_store.hpp"
#include "dlrun/launcher/run_dir.hpp"

namespace dlrun::launcher {

struct PolicyView {
  int gpus = 0;          // what the policy would give
  double speedup = 0;    // predicted speedup at that, over the fair share
  bool modelled = false; // from a published model (else the neutral prediction)
  int gpus_without_pins = 0;  // what it would give were every `dlrun resize` pin released
  // A running goodput job above its MIN, not pinned, that the policy may not shrink: its ranks
  // have not said that they handle the stop request (docs/elastic.md).
  bool cannot_be_resized = false;
  // A waiting job that may not start before an older one that has starved and does not fit
  // yet (goodput_policy.hpp): that job.
  std::optional<int64_t> held_back_by;
};

// The predicted goodput at 0 … max_gpus GPUs from RUN_DIR/goodput-model.json; empty when
// the job published none (or it cannot be read).
std::vector<double> published_goodput(const std::string& run_dir, int max_gpus);

// The pending and running GPU jobs on this machine (not Slurm's, not ssh ones), as the
// policy's input, with the records they came from (pointers into `jobs`):
// - a goodput job (policy = "goodput") that runs, handles the stop request, has MIN < MAX
//   and is not pinned by `dlrun resize` is elastic; any other running job keeps what it has;
// - a pending goodput job may get 0 or MIN..MAX; a pending fifo job is counted at its MIN
//   (the room it needs; it starts itself, in order) only at the head of the queue: one behind
//   another waiting job cannot start, so no room is made for it;
// - age: since its start or last resize (running), since submitted (pending).
struct PolicyInput {
  std::vector<PolicyJob> jobs;
  std::vector<const JobRecord*> records;
};
PolicyInput policy_input(const std::vector<JobRecord>& jobs, double now);

// What the policy would give each of those jobs now, keyed by id; empty when there are none
// or the machine has no GPU.
std::map<int64_t, PolicyView> policy_view(const std::vector<JobRecord>& jobs, int gpu_capacity, double now,
                                          PolicySettings settings = {});

}  // namespace dlrun::launcher
