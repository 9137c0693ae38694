#include "dlrun/launcher/policy_view.hpp"

#include <doctest/doctest.h>

using namespace dlrun::launcher;

namespace {
JobRecord record(int64_t id, JobState state, int min_ranks, int max_ranks, bool goodput) {
  JobRecord j;
  j.id = id;
  j.state = state;
  j.submitted.request = {true, min_ranks, max_ranks, {}};
  j.submitted.request.goodput = goodput;
  if (state != JobState::pending) j.allocation = {max_ranks, {}};
  return j;
}

std::vector<int64_t> ids(const PolicyInput& input) {
  std::vector<int64_t> out;
  for (const auto& job : input.jobs) out.push_back(job.id);
  return out;
}
}  // namespace

TEST_SUITE("launcher::PolicyView") {
  TEST_CASE("room is made only for the fifo job at the head of the queue, which alone can start") {
    // Two goodput jobs run; fifo job 3 waits for 3 GPUs, fifo job 4 (2 GPUs) behind it. Counting
    // job 4 shrank the goodput jobs for a job that could not start: the GPUs stayed idle.
    std::vector<JobRecord> jobs = {record(1, JobState::running, 1, 2, true), record(2, JobState::running, 1, 2, true),
                                   record(3, JobState::pending, 3, 3, false), record(4, JobState::pending, 2, 2, false)};
    CHECK(ids(policy_input(jobs, 100)) == std::vector<int64_t>{1, 2, 3});
    jobs[2].state = JobState::cancelled;
    CHECK(ids(policy_input(jobs, 100)) == std::vector<int64_t>{1, 2, 4});
    // A waiting goodput job older than job 4 takes no place in the fifo queue: the policy weighs
    // both (job 4 waited behind one that did not fit, while later goodput jobs started).
    jobs.push_back(record(0, JobState::pending, 1, 4, true));
    CHECK(ids(policy_input(jobs, 100)) == std::vector<int64_t>{1, 2, 4, 0});
    // A job whose ranks run elsewhere holds no place in this machine's queue.
    jobs.pop_back();
    jobs.push_back(record(0, JobState::pending, 1, 1, false));
    jobs.back().submitted.request.remote = true;
    CHECK(ids(policy_input(jobs, 100)) == std::vector<int64_t>{1, 2, 4});
  }
}
