// A trace-driven simulation of one machine's GPUs shared by many training jobs, under three
// policies: FIFO with fixed allocations, FIFO with greedy elastic starts (dlrun's queue before
// the goodput scheduler) and the goodput policy (launcher/goodput_policy.hpp, the code the
// scheduler runs). Each job's goodput at every GPU count comes from the runtime's own model
// (goodput/: a throughput model and a gradient noise scale, the best batch at each
// count), so the shapes are those real jobs publish. Prints a Markdown table.
//
// Usage: dlrun_scheduler_sim [--gpus 64] [--jobs 200] [--seed 1] [--arrivals-hours 8]
//                            [--interval 60] [--restart 30] [--fairness -1]

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <numeric>
#include <random>
#include <string>
#include <vector>

#include "dlrun/launcher/goodput_policy.hpp"
#include "goodput/goodput.hpp"

namespace {

using dlrun::launcher::PolicyJob;
using dlrun::launcher::PolicySettings;

struct Job {
  int id = 0;
  double arrival = 0;
  double work = 0;  // progress to finish, in samples at the initial batch's efficiency
  int min_gpus = 1, max_gpus = 1, fixed_gpus = 1;
  std::vector<double> goodput;  // samples/s of useful progress at 0 … max_gpus GPUs
  // Simulation state.
  int gpus = 0;
  double progress = 0, started = -1, finished = -1, last_change = 0, restart_until = 0;
};

struct Kind {
  const char* name;
  double alpha_c, beta_c, alpha_n, beta_n, gamma;  // throughput model (seconds)
  double noise_scale, initial_batch, max_batch, max_micro;
  int min_gpus, max_gpus, fixed_gpus;
  double work_lo, work_hi;  // samples
};

// Three kinds, as in Pollux's workloads: a small model that scales poorly (sync-bound, low
// noise scale), a mid-size one, and a large-batch-friendly one.
const Kind k_kinds[] = {
    {"small", 0.010, 0.00010, 0.020, 0.004, 1.5, 200, 128, 2048, 256, 1, 4, 1, 5e5, 2e6},
    {"medium", 0.020, 0.00050, 0.030, 0.003, 3.0, 2000, 256, 8192, 256, 1, 8, 2, 2.5e6, 1e7},
    {"large", 0.050, 0.00200, 0.050, 0.002, 6.0, 20000, 512, 32768, 128, 2, 16, 4, 1e7, 4e7},
};

std::vector<double> goodput_curve(const Kind& k, int max_gpus) {
  dlrun::runtime::ThroughputParams p;
  p.alpha_c = k.alpha_c;
  p.beta_c = k.beta_c;
  p.alpha_n = p.alpha_r = k.alpha_n;
  p.beta_n = p.beta_r = k.beta_n;
  p.gamma = k.gamma;
  dlrun::runtime::BatchLimits limits;
  limits.initial_batch = static_cast<int64_t>(k.initial_batch);
  limits.max_batch = static_cast<int64_t>(k.max_batch);
  limits.max_micro_batch = static_cast<int64_t>(k.max_micro);
  std::vector<double> g(max_gpus + 1, 0);
  for (int a = 1; a <= max_gpus; ++a) g[a] = dlrun::runtime::choose_batch(p, k.noise_scale, 1, a, limits).goodput;
  return g;
}

std::vector<Job> make_trace(int count, double arrivals_seconds, unsigned seed, int capacity) {
  std::mt19937 random(seed);
  std::uniform_real_distribution<double> unit(0, 1);
  std::vector<Job> jobs;
  for (int i = 0; i < count; ++i) {
    const Kind& k = k_kinds[static_cast<int>(unit(random) * 3) % 3];
    Job j;
    j.id = i;
    j.arrival = arrivals_seconds * unit(random);
    j.min_gpus = std::min(k.min_gpus, capacity);
    j.max_gpus = std::min(k.max_gpus, capacity);
    j.fixed_gpus = std::min(k.fixed_gpus, capacity);
    j.work = k.work_lo * std::exp(std::log(k.work_hi / k.work_lo) * unit(random));
    j.goodput = goodput_curve(k, j.max_gpus);
    jobs.push_back(j);
  }
  std::sort(jobs.begin(), jobs.end(), [](const Job& a, const Job& b) { return a.arrival < b.arrival; });
  return jobs;
}

enum class Policy { fifo_fixed, fifo_greedy, goodput };

struct Result {
  double mean_jct = 0, p95_jct = 0, makespan = 0, utilisation = 0;
  double decision_ms_max = 0, decision_ms_mean = 0;
};

Result simulate(std::vector<Job> jobs, Policy policy, int capacity, double interval, double restart,
                double fairness) {
  const double dt = 5;  // seconds per simulation step
  double now = 0, next_decision = 0, busy_gpu_seconds = 0;
  double decision_ms_sum = 0, decision_ms_max = 0;
  int decisions = 0, done = 0, arrived_before = 0;
  const int n = static_cast<int>(jobs.size());
  while (done < n) {
    int arrived = 0;
    for (const auto& j : jobs) arrived += j.arrival <= now;
    bool changed = arrived != arrived_before;
    arrived_before = arrived;
    int free = capacity;
    for (const auto& j : jobs) free -= j.gpus;
    if (policy == Policy::goodput) {
      if (changed || now >= next_decision) {
        std::vector<PolicyJob> input;
        std::vector<int> index;
        for (int i = 0; i < n; ++i) {
          const Job& j = jobs[i];
          if (j.arrival > now || j.finished >= 0) continue;
          PolicyJob p;
          p.id = j.id;
          p.min_gpus = j.min_gpus;
          p.max_gpus = j.max_gpus;
          p.current = j.gpus;
          p.age_seconds = j.gpus > 0 ? now - j.last_change : now - j.arrival;
          p.goodput = j.goodput;
          input.push_back(p);
          index.push_back(i);
        }
        PolicySettings s;
        s.capacity = capacity;
        s.fairness = fairness;
        s.restart_seconds = restart;
        auto t0 = std::chrono::steady_clock::now();
        auto decision = dlrun::launcher::decide_allocation(input, s);
        double ms = std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
        decision_ms_sum += ms;
        decision_ms_max = std::max(decision_ms_max, ms);
        ++decisions;
        for (size_t k = 0; k < index.size(); ++k) {
          Job& j = jobs[index[k]];
          if (decision.gpus[k] != j.gpus) {
            if (j.gpus > 0) j.restart_until = now + restart;  // checkpoint and restart at the new size
            if (j.started < 0 && decision.gpus[k] > 0) j.started = now;
            j.gpus = decision.gpus[k];
            j.last_change = now;
          }
        }
        next_decision = now + interval;
      }
    } else {
      // FIFO: the oldest waiting job starts when it fits; nobody passes it.
      for (auto& j : jobs) {
        if (j.arrival > now || j.started >= 0) continue;
        int want = policy == Policy::fifo_fixed ? j.fixed_gpus : std::min(j.max_gpus, free);
        if (want < j.min_gpus || want > free) break;
        j.gpus = want;
        j.started = j.last_change = now;
        free -= want;
      }
    }
    for (auto& j : jobs) {
      if (j.gpus == 0 || j.finished >= 0) continue;
      busy_gpu_seconds += j.gpus * dt;
      if (now >= j.restart_until) j.progress += j.goodput[j.gpus] * dt;
      if (j.progress >= j.work) {
        j.finished = now + dt;
        j.gpus = 0;
        ++done;
        next_decision = now;  // a completion frees GPUs: decide again
      }
    }
    now += dt;
  }
  Result r;
  std::vector<double> jct;
  for (const auto& j : jobs) {
    jct.push_back(j.finished - j.arrival);
    r.makespan = std::max(r.makespan, j.finished);
  }
  std::sort(jct.begin(), jct.end());
  r.mean_jct = std::accumulate(jct.begin(), jct.end(), 0.0) / n;
  r.p95_jct = jct[static_cast<size_t>(0.95 * (n - 1))];
  r.utilisation = busy_gpu_seconds / (capacity * r.makespan);
  r.decision_ms_max = decision_ms_max;
  r.decision_ms_mean = decisions ? decision_ms_sum / decisions : 0;
  return r;
}

}  // namespace

int main(int argc, char** argv) {
  int gpus = 64, count = 200;
  unsigned seed = 1;
  double hours = 8, interval = 60, restart = 30, fairness = -1;
  for (int i = 1; i + 1 < argc; i += 2) {
    std::string flag = argv[i];
    double value = std::atof(argv[i + 1]);
    if (flag == "--gpus") gpus = static_cast<int>(value);
    else if (flag == "--jobs") count = static_cast<int>(value);
    else if (flag == "--seed") seed = static_cast<unsigned>(value);
    else if (flag == "--arrivals-hours") hours = value;
    else if (flag == "--interval") interval = value;
    else if (flag == "--restart") restart = value;
    else if (flag == "--fairness") fairness = value;
    else {
      std::fprintf(stderr, "unknown option %s\n", argv[i]);
      return 2;
    }
  }
  auto trace = make_trace(count, hours * 3600, seed, gpus);
  std::printf("%d GPUs, %d jobs arriving over %.1f h (seed %u), decisions every %.0f s and on every "
              "arrival and completion, restart %.0f s, fairness p = %.1f\n\n",
              gpus, count, hours, seed, interval, restart, fairness);
  std::printf("| policy | mean JCT | p95 JCT | makespan | GPU utilisation | decision time (mean / max) |\n");
  std::printf("|---|---|---|---|---|---|\n");
  const std::pair<const char*, Policy> policies[] = {
      {"FIFO, fixed GPUs", Policy::fifo_fixed}, {"FIFO, greedy elastic", Policy::fifo_greedy},
      {"goodput", Policy::goodput}};
  std::vector<Result> results;
  for (const auto& [name, policy] : policies) {
    Result r = simulate(trace, policy, gpus, interval, restart, fairness);
    results.push_back(r);
    std::printf("| %s | %.2f h | %.2f h | %.2f h | %.0f%% | %s |\n", name, r.mean_jct / 3600, r.p95_jct / 3600,
                r.makespan / 3600, 100 * r.utilisation,
                policy == Policy::goodput
                    ? (std::to_string(r.decision_ms_mean).substr(0, 5) + " ms / " +
                       std::to_string(r.decision_ms_max).substr(0, 5) + " ms")
                          .c_str()
                    : "-");
  }
  std::printf("\nmean JCT: goodput is %.2fx lower than FIFO-fixed, %.2fx lower than greedy elastic\n",
              results[0].mean_jct / results[2].mean_jct, results[1].mean_jct / results[2].mean_jct);
  return 0;
}
