#include "dlrun/launcher/policy_view.hpp"

#include <stdexcept>

#include "dlrun/launcher/fd_io.hpp"
#include "dlrun/protocol.hpp"
#include "goodput/goodput_model.hpp"

namespace dlrun::launcher {

std::vector<double> published_goodput(const std::string& run_dir, int max_gpus) {
  if (run_dir.empty()) return {};
  auto text = read_file(run_dir + "/" + run_files::k_goodput_model);
  if (!text) return {};
  auto model = runtime::parse_goodput_model(*text);
  if (!model) return {};
  std::vector<double> goodput(max_gpus + 1, 0);
  for (int g = 1; g <= max_gpus; ++g) goodput[g] = runtime::predict_goodput(*model, g);
  return goodput;
}

PolicyInput policy_input(const std::vector<JobRecord>& jobs, double now) {
  PolicyInput input;
  // A waiting fifo job starts only at the head of the queue (JobStore::try_start): room made
  // for one behind it would stay idle.
  const int64_t head = queue_head(jobs, true);
  for (const auto& job : jobs) {
    const auto& request = job.submitted.request;
    const bool pending = job.state == JobState::pending;
    const bool active = pending || job.state == JobState::running || job.state == JobState::rescaling;
    if (!active || !request.uses_gpus || request.remote || job.submitted.slurm) continue;
    if (pending && !request.goodput && job.id != head) continue;
    PolicyJob p;
    p.id = job.id;
    p.min_gpus = std::max(1, request.min_ranks);
    p.max_gpus = std::max(p.min_gpus, request.max_ranks);
    if (pending && !request.goodput) p.max_gpus = p.min_gpus;
    p.current = pending ? 0 : std::max(0, job.allocation.ranks);
    // A `dlrun local` elastic job shrunk by dlrun resize keeps every GPU it started with (it grows
    // back onto them): it holds them all, whatever its rank count (the scheduler gave their GPUs
    // to a waiting job, whose start then failed every round).
    if (!pending && !request.goodput) p.current = std::max(p.current, static_cast<int>(job.allocation.gpu_ids.size()));
    const double since = pending ? job.submitted_at : job.sized_since();
    p.age_seconds = since > 0 ? std::max(0.0, now - since) : 0;
    p.elastic = p.min_gpus < p.max_gpus &&
                (pending || (request.goodput && job.state == JobState::running && handles_stop(job.run_dir)));
    if (job.pinned > 0 && request.goodput && !pending) p.pinned = p.current;
    if (!pending) p.goodput = published_goodput(job.run_dir, p.max_gpus);
    input.jobs.push_back(std::move(p));
    input.records.push_back(&job);
  }
  return input;
}

std::map<int64_t, PolicyView> policy_view(const std::vector<JobRecord>& jobs, int gpu_capacity, double now,
                                          PolicySettings settings) {
  std::map<int64_t, PolicyView> view;
  if (gpu_capacity <= 0) return view;
  const PolicyInput input = policy_input(jobs, now);
  if (input.jobs.empty()) return view;
  settings.capacity = gpu_capacity;
  try {
    auto decision = decide_allocation(input.jobs, settings);
    const PolicyConstraints constraints = policy_constraints(input.jobs, settings);
    // What the pins hold back: the same decision with them released (a waiting job's reason
    // names a pin only where that would give it GPUs).
    std::vector<int> without_pins = decision.gpus;
    auto unpinned = input.jobs;
    bool any_pin = false;
    for (auto& job : unpinned) {
      any_pin = any_pin || job.pinned.has_value();
      job.pinned.reset();
    }
    if (any_pin) without_pins = decide_allocation(unpinned, settings).gpus;
    for (size_t i = 0; i < input.jobs.size(); ++i) {
      const auto& job = input.jobs[i];
      const JobRecord& record = *input.records[i];
      PolicyView v{decision.gpus[i], decision.speedup[i], !job.goodput.empty(), without_pins[i], false, std::nullopt};
      // (one at its MIN has nothing the policy could take back)
      v.cannot_be_resized = record.state == JobState::running && record.submitted.request.goodput &&
                            job.current > job.min_gpus && !job.pinned && !job.elastic;
      if (constraints.held_back[i]) v.held_back_by = constraints.blocked;
      view[job.id] = v;
    }
  } catch (const std::invalid_argument&) {
    // A queue the policy cannot describe (e.g. more GPUs held than the machine has now):
    // nothing to show.
  }
  return view;
}

}  // namespace dlrun::launcher
