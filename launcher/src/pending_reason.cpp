#include "dlrun/launcher/pending_reason.hpp"

#include <algorithm>

#include <fmt/format.h>
#include <fmt/ranges.h>

#include "dlrun/launcher/slurm.hpp"
#include "dlrun/launcher/text.hpp"

namespace dlrun::launcher {
namespace {

std::string goodput_reason(const QueueState& queue, const PolicyView* policy) {
  if (!queue.scheduler_running) return "waiting for the scheduler (none runs yet; its supervisor starts one)";
  // What other users' jobs hold is not the policy's to share: say whose it is.
  const std::string elsewhere = gpus_held_elsewhere_suffix(queue.capacity.gpus_elsewhere);
  if (!policy) {
    if (queue.capacity.gpus > 0 && queue.capacity.gpus_free_of_others() == 0) {
      return "waiting for the scheduler (no GPU is free of other users' jobs" + elsewhere + ")";
    }
    return "waiting for the scheduler";
  }
  if (policy->gpus == 0 && policy->held_back_by) {
    return fmt::format("waiting for the scheduler (behind job {}, which has waited past starvation_seconds and "
                       "starts first, once the jobs that run leave it room{})",
                       *policy->held_back_by, elsewhere);
  }
  if (policy->gpus == 0) {
    // GPUs the policy may not move: a pin, where releasing the pins would give this job GPUs
    // (say which, and how to release it); a job whose ranks have not said that they handle the
    // stop request (the policy cannot shrink it).
    std::string held;
    for (const auto& other : *queue.active) {
      if (!other.submitted.request.goodput || (other.state != JobState::running && other.state != JobState::rescaling))
        continue;
      if (other.pinned > 0 && policy->gpus_without_pins > 0) {
        held += fmt::format("; job {} is pinned at {} by dlrun resize (dlrun resize {} auto releases it)", other.id,
                            counted(other.pinned, "GPU"), other.id);
      }
      const PolicyView* view = nullptr;
      if (queue.policy) {
        if (auto it = queue.policy->find(other.id); it != queue.policy->end()) view = &it->second;
      }
      if (view && view->cannot_be_resized) {
        held += fmt::format("; job {} holds {} and cannot be resized: its ranks have not said that they handle the "
                            "stop request (docs/elastic.md)",
                            other.id, counted(other.allocation.ranks, "GPU"));
      }
    }
    return "waiting for the scheduler (the policy gives it no GPU now" + held + elsewhere + ")";
  }
  return fmt::format("waiting for the scheduler (the policy gives it {})", counted(policy->gpus, "GPU"));
}

// The resources a job at the head of the queue still waits for; empty when they are free.
std::string resources_reason(const ResourceRequest& request, const QueueState& queue) {
  const Usage usage = usage_of(*queue.active);
  if (fit(request, queue.capacity, usage)) return {};
  if (!request.uses_gpus) {
    const int free = std::max(0, queue.capacity.cpu_slots - usage.cpu_slots_in_use);
    return fmt::format("waiting for {} ({} free)", counted(request.min_ranks, "CPU slot"), free);
  }
  // GPUs another store's jobs hold are named with their holder: dlrun status does not list those.
  std::vector<std::string> noted;
  auto note_elsewhere = [&](const std::string& id) {
    if (!queue.capacity.gpus_elsewhere.count(id)) return false;
    noted.push_back(id);
    return true;
  };
  auto elsewhere = [&] { return gpus_held_elsewhere_suffix(queue.capacity.gpus_elsewhere, noted); };
  if (!request.gpu_ids.empty()) {
    std::string busy;
    int count = 0;
    for (const auto& id : request.gpu_ids) {
      const bool other_store = note_elsewhere(id);
      if (!other_store && !usage.gpus_in_use.count(id)) continue;
      busy += (busy.empty() ? "" : ",") + id;
      ++count;
    }
    return fmt::format("waiting for GPU{} {} (in use{})", count == 1 ? "" : "s", busy, elsewhere());
  }
  int free = 0;
  for (int i = 0; i < queue.capacity.gpus; ++i) {
    const std::string id = std::to_string(i);
    const bool other_store = note_elsewhere(id);
    free += other_store || usage.gpus_in_use.count(id) ? 0 : 1;
  }
  // Which of this store's jobs hold them (a job that took every GPU on an elastic range, and
  // cannot give any back, was not named).
  std::vector<std::string> holders;
  size_t more = 0;
  for (const auto& job : *queue.active) {
    if ((job.state != JobState::running && job.state != JobState::rescaling) || job.submitted.request.remote ||
        !job.submitted.request.uses_gpus || job.allocation.gpu_ids.empty())
      continue;
    if (holders.size() == 3) {
      ++more;
      continue;
    }
    holders.push_back(fmt::format("job {} holds {}", job.id, job.allocation.gpu_ids.size()));
  }
  std::string held = holders.empty() ? "" : "; " + fmt::format("{}", fmt::join(holders, ", "));
  if (more > 0) held += fmt::format(" and {} more", counted(static_cast<long long>(more), "job"));
  return fmt::format("waiting for {} ({} free{}{})", counted(request.min_ranks, "GPU"), free, held, elsewhere());
}

}  // namespace

std::vector<std::string> gpus_held_elsewhere_text(const std::map<std::string, std::string>& held,
                                                  const std::vector<std::string>& ids) {
  std::vector<std::pair<std::string, std::vector<std::string>>> holders;  // in the order first met
  auto add = [&](const std::string& id, const std::string& who) {
    auto same = std::find_if(holders.begin(), holders.end(), [&](const auto& h) { return h.first == who; });
    if (same == holders.end()) same = holders.insert(holders.end(), {who, {}});
    same->second.push_back(id);
  };
  if (ids.empty()) {
    for (const auto& [id, who] : held) add(id, who);
  } else {
    for (const auto& id : ids) {
      if (auto it = held.find(id); it != held.end()) add(id, it->second);
    }
  }
  std::vector<std::string> texts;
  for (const auto& [who, gpus] : holders) {
    texts.push_back(fmt::format("GPU{} {} {} in use by {}", gpus.size() == 1 ? "" : "s", fmt::join(gpus, ","),
                                gpus.size() == 1 ? "is" : "are", who));
  }
  return texts;
}

std::string gpus_held_elsewhere_suffix(const std::map<std::string, std::string>& held,
                                       const std::vector<std::string>& ids) {
  std::string suffix;
  for (const auto& text : gpus_held_elsewhere_text(held, ids)) suffix += "; " + text;
  return suffix;
}

Usage usage_of(const std::vector<JobRecord>& jobs) {
  Usage usage;
  for (const auto& job : jobs) {
    if ((job.state != JobState::running && job.state != JobState::rescaling) || job.submitted.request.remote) continue;
    if (job.submitted.request.uses_gpus) {
      usage.gpus_in_use.insert(job.allocation.gpu_ids.begin(), job.allocation.gpu_ids.end());
    } else {
      usage.cpu_slots_in_use += job.allocation.ranks;
    }
  }
  return usage;
}

std::string pending_reason(const JobRecord& job, const QueueState& queue, const PolicyView* policy) {
  if (job.submitted.slurm) {
    if (job.slurm_id <= 0) return "being handed to Slurm";
    if (job.reason.empty()) return fmt::format("in Slurm's queue (Slurm job {})", job.slurm_id);
    const std::string never = slurm_never_hint(job.reason);
    if (never.empty()) return fmt::format("in Slurm's queue (Slurm job {}: {})", job.slurm_id, job.reason);
    return fmt::format("in Slurm's queue (Slurm job {}: {}): {}, so it will not start as it is (dlrun cancel it, "
                       "and submit what the partition allows)",
                       job.slurm_id, job.reason, never);
  }
  if (job.submitted.request.goodput) return goodput_reason(queue, policy);
  if (job.submitted.request.remote) return "starting (its ranks run on other hosts)";
  // Jobs whose ranks run elsewhere hold no place in this machine's queue.
  if (const int64_t head = queue_head(*queue.active, job.submitted.request.uses_gpus); head >= 0 && head < job.id) {
    return fmt::format("behind job {} (fifo)", head);
  }
  if (job.submitted.request.uses_gpus && queue.goodput_starving_before > 0) {
    for (const auto& other : *queue.active) {
      if (other.state == JobState::pending && other.submitted.request.goodput && !other.submitted.request.remote &&
          other.submitted.request.uses_gpus && other.id < job.id && other.submitted_at < queue.goodput_starving_before) {
        return fmt::format("behind job {}, which has waited past starvation_seconds (goodput): the GPUs that come free "
                           "are its first",
                           other.id);
      }
    }
  }
  std::string waiting = resources_reason(job.submitted.request, queue);
  return waiting.empty() ? "starting (its resources are free)" : waiting;
}

}  // namespace dlrun::launcher
