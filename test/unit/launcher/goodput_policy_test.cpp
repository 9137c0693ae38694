#include "dlrun/launcher/goodput_policy.hpp"

#include <cmath>
#include <functional>
#include <optional>
#include <random>
#include <stdexcept>

#include <doctest/doctest.h>

using namespace dlrun::launcher;

namespace {

// Goodput of a job whose step costs `fixed` + `per_gpu_sync` per extra GPU, with perfect
// data parallelism otherwise: g / (1 + sync·(g−1)) (Amdahl-like), scaled.
std::vector<double> curve(int max_gpus, double sync, double scale = 1) {
  std::vector<double> g(max_gpus + 1, 0);
  for (int a = 1; a <= max_gpus; ++a) g[a] = scale * a / (1 + sync * (a - 1));
  return g;
}

PolicyJob running(int64_t id, int min, int max, int current, double age, std::vector<double> goodput = {}) {
  PolicyJob j;
  j.id = id;
  j.min_gpus = min;
  j.max_gpus = max;
  j.current = current;
  j.age_seconds = age;
  j.goodput = std::move(goodput);
  return j;
}

PolicyJob pending(int64_t id, int min, int max, double waited, std::vector<double> goodput = {}) {
  return running(id, min, max, 0, waited, std::move(goodput));
}

// Every allocation the constraints allow, the best score: what the DP must find.
PolicyScore brute_force(const std::vector<PolicyJob>& jobs, const PolicySettings& s) {
  const int n = static_cast<int>(jobs.size());
  const PolicyConstraints c = policy_constraints(jobs, s);
  const auto& age_index = c.age_index;
  const auto& must = c.must_start;
  std::optional<PolicyScore> best;
  std::function<void(int, int, PolicyScore)> go = [&](int i, int used, PolicyScore value) {
    if (i == n) {
      if (!best || better(value, *best)) best = value;
      return;
    }
    for (int a : c.held_back[i] ? std::vector<int>{0} : allowed_gpus(jobs[i], must[i])) {
      if (used + a > s.capacity) continue;
      PolicyScore next = value;
      next += job_score(jobs[i], a, fair_share(jobs[i], s.capacity, n), age_index[i], n, s);
      go(i + 1, used + a, next);
    }
  };
  go(0, 0, PolicyScore{});
  return *best;
}

}  // namespace

TEST_SUITE("launcher::goodput_policy") {
  TEST_CASE("the dynamic programme finds the exact optimum of small cases, as brute force does") {
    std::mt19937 random(7);
    auto uniform = [&](double lo, double hi) { return std::uniform_real_distribution<double>(lo, hi)(random); };
    auto integer = [&](int lo, int hi) { return std::uniform_int_distribution<int>(lo, hi)(random); };
    for (int round = 0; round < 400; ++round) {
      PolicySettings s;
      s.capacity = integer(1, 8);
      s.fairness = std::vector<double>{1, 0.5, 0, -1, -3}[round % 5];
      s.restart_seconds = 30;
      std::vector<PolicyJob> jobs;
      int fixed = 0;
      for (int k = integer(1, 5); k > 0; --k) {
        int min = integer(1, 3), max = min + integer(0, 4);
        PolicyJob j = pending(k, min, max, uniform(0, 900), integer(0, 3) ? curve(max, uniform(0, 0.5), uniform(0.5, 2))
                                                                           : std::vector<double>{});
        j.elastic = integer(0, 4) > 0;
        if (integer(0, 1) && fixed + max <= s.capacity) {  // running: needs room for its current share
          j.current = j.elastic ? integer(min, max) : max;
          fixed += j.elastic ? min : max;
          if (j.elastic && integer(0, 5) == 0) j.pinned = j.current;
          if (j.pinned) fixed += *j.pinned - min;
        }
        jobs.push_back(j);
      }
      CAPTURE(round);
      auto decision = decide_allocation(jobs, s);
      const PolicyScore exact = brute_force(jobs, s);
      CHECK(decision.score.waiting == exact.waiting);
      CHECK(decision.score.waiting_age == exact.waiting_age);
      CHECK(decision.score.utility == doctest::Approx(exact.utility).epsilon(1e-9));
      int used = 0;
      for (size_t i = 0; i < jobs.size(); ++i) {
        int a = decision.gpus[i];
        used += a;
        if (jobs[i].current > 0) CHECK(a >= jobs[i].min_gpus);  // a running job is never stopped
        if (a > 0) CHECK(a >= jobs[i].min_gpus);
        CHECK(a <= jobs[i].max_gpus);
        if (jobs[i].pinned) CHECK(a == *jobs[i].pinned);
        if (jobs[i].current > 0 && !jobs[i].elastic) CHECK(a == jobs[i].current);
      }
      CHECK(used <= s.capacity);
    }
  }

  TEST_CASE("a job alone takes every GPU, a newcomer starts at once, the first grows back after it") {
    PolicySettings s;
    s.capacity = 8;
    auto a = running(1, 1, 8, 2, 3600, curve(8, 0.05));
    CHECK(decide_allocation({a}, s).gpus == std::vector<int>{8});
    a.current = 8;
    auto b = pending(2, 2, 8, 1, curve(8, 0.05));
    auto both = decide_allocation({a, b}, s);
    CHECK(both.gpus[1] >= 2);
    CHECK(both.gpus[0] + both.gpus[1] <= 8);
    CHECK(both.gpus[0] < 8);
    a.current = both.gpus[0];
    CHECK(decide_allocation({a}, s).gpus == std::vector<int>{8});
  }

  TEST_CASE("a job without a model gets its fair share on faith, not more, GPUs nobody else wants go to it") {
    PolicySettings s;
    s.capacity = 8;
    s.fairness = 0;
    // Alone, an unmeasured job takes every GPU.
    CHECK(decide_allocation({pending(1, 1, 8, 1)}, s).gpus == std::vector<int>{8});
    // Beside a measured job that still gains from GPUs, it takes its fair share (4), no more:
    // with goodput ∝ GPUs beyond it, 5 would have won (+25% for it, -11% for the other).
    auto scalable = running(1, 1, 8, 8, 3600, curve(8, 0.3));
    auto unmeasured = pending(2, 1, 8, 1);
    CHECK(decide_allocation({scalable, unmeasured}, s).gpus == std::vector<int>{4, 4});
    // Beside a job that is best on one GPU, it takes the rest.
    auto sync_bound = running(1, 1, 8, 1, 3600, {0, 1.0, 0.7, 0.5, 0.4, 0.3, 0.25, 0.2, 0.18});
    CHECK(decide_allocation({sync_bound, unmeasured}, s).gpus == std::vector<int>{1, 7});
  }

  TEST_CASE("rigid and pinned jobs keep their GPUs, pending jobs start oldest first") {
    PolicySettings s;
    s.capacity = 4;
    auto rigid = running(1, 3, 3, 3, 10);
    rigid.elastic = false;
    auto old_job = pending(2, 1, 1, 500);
    auto new_job = pending(3, 1, 1, 5);
    auto d = decide_allocation({rigid, new_job, old_job}, s);
    CHECK(d.gpus == std::vector<int>{3, 0, 1});
    auto pinned = running(4, 1, 4, 2, 10, curve(4, 0));
    pinned.pinned = 2;
    CHECK(decide_allocation({pinned}, s).gpus == std::vector<int>{2});
  }

  TEST_CASE("a running job shrinks to let a pending one in, even one that scales poorly") {
    PolicySettings s;
    s.capacity = 6;
    // A scales perfectly, B hardly at all: speedup alone would give A everything.
    auto a = running(1, 2, 6, 6, 3600, curve(6, 0));
    auto b = pending(2, 2, 2, 1, curve(2, 0.9, 0.01));
    CHECK(decide_allocation({a, b}, s).gpus == std::vector<int>{4, 2});
  }

  TEST_CASE("a big job that waited too long is not passed over by small ones forever") {
    PolicySettings s;
    s.capacity = 4;
    s.starvation_seconds = 600;
    auto big = pending(1, 4, 4, 100);
    auto small1 = pending(2, 2, 2, 10), small2 = pending(3, 2, 2, 5);
    // Two jobs running beat one: before its time the big one waits ...
    CHECK(decide_allocation({big, small1, small2}, s).gpus == std::vector<int>{0, 2, 2});
    // ... and once it has waited past starvation_seconds it starts.
    big.age_seconds = 601;
    CHECK(decide_allocation({big, small1, small2}, s).gpus == std::vector<int>{4, 0, 0});
  }

  TEST_CASE("a starving job that does not fit yet holds back the jobs that came after it") {
    // Four elastic jobs hold 8 GPUs at MIN 1 each; a rigid 6 cannot fit until two end. Jobs that
    // came later took what the ended ones left, one GPU each, and it waited for good.
    PolicySettings s;
    s.capacity = 8;
    s.starvation_seconds = 600;
    std::vector<PolicyJob> jobs = {running(1, 1, 8, 2, 900), running(2, 1, 8, 2, 900), running(3, 1, 8, 2, 900),
                                   running(4, 1, 8, 2, 900), pending(5, 6, 6, 700), pending(6, 1, 8, 30)};
    jobs[4].elastic = false;
    const PolicyConstraints c = policy_constraints(jobs, s);
    CHECK(c.blocked == 5);
    CHECK(c.held_back == std::vector<bool>{false, false, false, false, false, true});
    CHECK(decide_allocation(jobs, s).gpus[5] == 0);
    // Before job 5 starved, job 6 could start (two jobs running beat one waiting).
    jobs[4].age_seconds = 100;
    CHECK_FALSE(policy_constraints(jobs, s).blocked);
    CHECK(decide_allocation(jobs, s).gpus[5] >= 1);
    // Once two have ended, job 5 fits and must start: the others shrink for it.
    jobs[4].age_seconds = 700;
    jobs.erase(jobs.begin(), jobs.begin() + 2);
    const auto decision = decide_allocation(jobs, s);
    CHECK(decision.gpus[2] == 6);
    CHECK(decision.gpus[3] == 0);
  }

  TEST_CASE("the restart penalty stops a job that just restarted from flapping") {
    PolicySettings s;
    s.capacity = 4;
    s.restart_seconds = 30;
    // 4 GPUs would be 5% better than 3: worth a restart after an hour, not after 20 s.
    std::vector<double> g = {0, 1, 1.9, 2.8, 2.94};
    auto young = running(1, 1, 4, 3, 20, g);
    CHECK(decide_allocation({young}, s).gpus == std::vector<int>{3});
    auto old = running(1, 1, 4, 3, 3600, g);
    CHECK(decide_allocation({old}, s).gpus == std::vector<int>{4});
  }

  TEST_CASE("the fairness knob: p = 1 favours total speedup, p = -1 evens it out") {
    PolicySettings s;
    s.capacity = 6;
    auto scalable = running(1, 1, 6, 3, 3600, curve(6, 0.0));
    auto poor = running(2, 1, 6, 3, 3600, curve(6, 0.6));
    s.fairness = 1;
    auto greedy = decide_allocation({scalable, poor}, s);
    s.fairness = -1;
    auto fair = decide_allocation({scalable, poor}, s);
    CHECK(greedy.gpus[0] >= fair.gpus[0]);
    CHECK(greedy.gpus[0] > greedy.gpus[1]);
  }

  TEST_CASE("strong fairness never keeps a job waiting that a shrink would let in") {
    PolicySettings s;
    s.capacity = 4;
    s.fairness = -5;
    s.restart_seconds = 30;
    // A restarted 5 s ago: shrinking it is heavily penalised, yet B must start.
    auto a = running(1, 2, 4, 4, 5, curve(4, 0));
    auto b = pending(2, 2, 2, 1, curve(2, 0));
    CHECK(decide_allocation({a, b}, s).gpus == std::vector<int>{2, 2});
  }

  TEST_CASE("a young job that must shrink to let another in shrinks no more than it must") {
    PolicySettings s;
    s.capacity = 4;
    auto a = running(1, 1, 4, 4, 5, curve(4, 0.05));
    auto b = pending(2, 1, 1, 1);
    CHECK(decide_allocation({a, b}, s).gpus == std::vector<int>{3, 1});
  }

  TEST_CASE("inputs no allocation can meet are refused") {
    PolicySettings s;
    s.capacity = 2;
    CHECK_THROWS_AS(decide_allocation({running(1, 3, 4, 3, 10)}, s), std::invalid_argument);
    CHECK_THROWS_AS(decide_allocation({pending(1, 3, 2, 10)}, s), std::invalid_argument);
  }
}
