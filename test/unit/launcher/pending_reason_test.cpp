#include "dlrun/launcher/pending_reason.hpp"

#include <doctest/doctest.h>

using namespace dlrun::launcher;

namespace {
JobRecord record(int64_t id, JobState state, bool gpus, int ranks, std::vector<std::string> held = {}) {
  JobRecord j;
  j.id = id;
  j.state = state;
  j.submitted.request = {gpus, ranks, ranks, {}};
  if (state != JobState::pending) j.allocation = {ranks, std::move(held)};
  return j;
}
}  // namespace

TEST_SUITE("launcher::PendingReason") {
  TEST_CASE("the head of the queue waits for its resources, and says how many are free") {
    std::vector<JobRecord> jobs = {record(1, JobState::running, true, 2, {"0", "1"}),
                                   record(2, JobState::pending, true, 4),
                                   record(3, JobState::pending, false, 1)};
    QueueState queue{&jobs, Capacity{4, 2}, false};
    CHECK(pending_reason(jobs[1], queue, nullptr) == "waiting for 4 GPUs (2 free; job 1 holds 2)");
    // A CPU job does not wait behind a GPU job: neither uses what the other waits for.
    CHECK(pending_reason(jobs[2], queue, nullptr) == "starting (its resources are free)");
    jobs.push_back(record(4, JobState::running, false, 2));
    CHECK(pending_reason(jobs[2], queue, nullptr) == "waiting for 1 CPU slot (0 free)");
    jobs.push_back(record(5, JobState::pending, false, 1));
    CHECK(pending_reason(jobs[4], queue, nullptr) == "behind job 3 (fifo)");
  }
  TEST_CASE("the head of the queue is the oldest pending job whose ranks run here") {
    std::vector<JobRecord> jobs = {record(1, JobState::running, true, 2, {"0", "1"}),
                                   record(2, JobState::pending, true, 4),
                                   record(3, JobState::pending, false, 1)};
    CHECK(queue_head(jobs, true) == 2);
    CHECK(queue_head(jobs, false) == 3);  // GPU jobs and CPU jobs queue apart
    jobs[1].submitted.request.remote = true;  // its ranks run on other hosts
    CHECK(queue_head(jobs, true) == -1);
    jobs[2].state = JobState::cancelled;
    CHECK(queue_head(jobs, false) == -1);
    CHECK(queue_head({}, true) == -1);
  }
  TEST_CASE("GPUs asked for by number wait for those in use") {
    std::vector<JobRecord> jobs = {record(1, JobState::running, true, 2, {"0", "1"}), record(2, JobState::pending, true, 2)};
    jobs[1].submitted.request.gpu_ids = {"1", "2"};
    QueueState queue{&jobs, Capacity{4, 2}, false};
    CHECK(pending_reason(jobs[1], queue, nullptr) == "waiting for GPU 1 (in use)");
  }
  TEST_CASE("GPUs another store's jobs hold are not free, and their holder is named") {
    std::vector<JobRecord> jobs = {record(1, JobState::running, true, 1, {"0"}), record(2, JobState::pending, true, 3)};
    Capacity capacity{4, 2};
    capacity.gpus_elsewhere = {{"2", "user bob's dlrun job 7 (pid 99)"}};
    QueueState queue{&jobs, capacity, false};
    CHECK(pending_reason(jobs[1], queue, nullptr) ==
          "waiting for 3 GPUs (2 free; job 1 holds 1; GPU 2 is in use by user bob's dlrun job 7 (pid 99))");
    jobs[1].submitted.request.gpu_ids = {"2", "3"};
    CHECK(pending_reason(jobs[1], queue, nullptr) == "waiting for GPU 2 (in use; GPU 2 is in use by user bob's dlrun "
                                                     "job 7 (pid 99))");
    // One part per holder, its GPUs together.
    queue.capacity.gpus_elsewhere = {{"0", "user ann's dlrun job 1 (pid 5)"}, {"2", "user bob's dlrun job 7 (pid 99)"},
                                     {"3", "user ann's dlrun job 1 (pid 5)"}};
    jobs[1].submitted.request.gpu_ids.clear();
    CHECK(pending_reason(jobs[1], queue, nullptr) == "waiting for 3 GPUs (1 free; job 1 holds 1; GPUs 0,3 are in use by user ann's "
                                                     "dlrun job 1 (pid 5); GPU 2 is in use by user bob's dlrun job 7 "
                                                     "(pid 99))");
    queue.capacity.gpus_elsewhere.clear();
    CHECK(pending_reason(jobs[1], queue, nullptr) == "starting (its resources are free)");
  }
  TEST_CASE("a goodput job that waits because other users' jobs hold GPUs says whose they are") {
    std::vector<JobRecord> jobs = {record(1, JobState::pending, true, 2)};
    jobs[0].submitted.request.goodput = true;
    Capacity capacity{2, 2};
    capacity.gpus_elsewhere = {{"0", "user ann's dlrun job 1 (pid 5)"}, {"1", "user ann's dlrun job 1 (pid 5)"}};
    QueueState queue{&jobs, capacity, true};
    CHECK(pending_reason(jobs[0], queue, nullptr) == "waiting for the scheduler (no GPU is free of other users' jobs; "
                                                     "GPUs 0,1 are in use by user ann's dlrun job 1 (pid 5))");
    queue.capacity.gpus_elsewhere.erase("1");
    PolicyView none{0, 0, false, 0, false, std::nullopt};
    CHECK(pending_reason(jobs[0], queue, &none) == "waiting for the scheduler (the policy gives it no GPU now; GPU 0 "
                                                   "is in use by user ann's dlrun job 1 (pid 5))");
    CHECK(pending_reason(jobs[0], queue, nullptr) == "waiting for the scheduler");
  }
  TEST_CASE("a goodput job waits for the scheduler, and says what the policy gives it") {
    std::vector<JobRecord> jobs = {record(1, JobState::pending, true, 2)};
    jobs[0].submitted.request.goodput = true;
    QueueState queue{&jobs, Capacity{4, 2}, false};
    CHECK(pending_reason(jobs[0], queue, nullptr) == "waiting for the scheduler (none runs yet; its supervisor starts one)");
    queue.scheduler_running = true;
    CHECK(pending_reason(jobs[0], queue, nullptr) == "waiting for the scheduler");
    PolicyView none{0, 0, false, 0, false, std::nullopt}, three{3, 1.2, true, 0, false, std::nullopt};
    CHECK(pending_reason(jobs[0], queue, &none) == "waiting for the scheduler (the policy gives it no GPU now)");
    CHECK(pending_reason(jobs[0], queue, &three) == "waiting for the scheduler (the policy gives it 3 GPUs)");
    // A pin holds GPUs the policy may not move: the waiting job says which, and how to release it.
    jobs.push_back(record(2, JobState::running, true, 4, {"0", "1", "2", "3"}));
    jobs[1].submitted.request.goodput = true;
    jobs[1].pinned = 4;
    // Named only where releasing the pins would give the waiting job GPUs (it was named whenever
    // there was a pin, also where a job of fixed size held what the waiting one needed).
    CHECK(pending_reason(jobs[0], queue, &none) == "waiting for the scheduler (the policy gives it no GPU now)");
    PolicyView pinned_out{0, 0, false, 2, false, std::nullopt};
    CHECK(pending_reason(jobs[0], queue, &pinned_out) ==
          "waiting for the scheduler (the policy gives it no GPU now; job 2 is pinned at 4 GPUs by dlrun resize "
          "(dlrun resize 2 auto releases it))");
    // A job the policy cannot shrink, as its ranks have not said that they handle the stop request.
    jobs[1].pinned = 0;
    std::map<int64_t, PolicyView> views{{1, none}, {2, PolicyView{4, 1, false, 4, true, std::nullopt}}};
    queue.policy = &views;
    CHECK(pending_reason(jobs[0], queue, &none) ==
          "waiting for the scheduler (the policy gives it no GPU now; job 2 holds 4 GPUs and cannot be resized: its "
          "ranks have not said that they handle the stop request (docs/elastic.md))");
  }
  TEST_CASE("a Slurm job waits in Slurm's queue") {
    std::vector<JobRecord> jobs = {record(1, JobState::pending, false, 1)};
    jobs[0].submitted.slurm = true;
    QueueState queue{&jobs, Capacity{0, 1}, false};
    CHECK(pending_reason(jobs[0], queue, nullptr) == "being handed to Slurm");
    jobs[0].slurm_id = 77;
    CHECK(pending_reason(jobs[0], queue, nullptr) == "in Slurm's queue (Slurm job 77)");
  }
  TEST_CASE("a job whose ranks run elsewhere neither waits in this machine's queue nor holds it up") {
    std::vector<JobRecord> jobs = {record(1, JobState::pending, false, 4), record(2, JobState::pending, false, 2),
                                   record(3, JobState::pending, false, 1)};
    jobs[0].submitted.slurm = true;  // pending in Slurm's queue
    jobs[0].submitted.request.remote = true;
    jobs[0].slurm_id = 77;
    jobs[1].submitted.request.remote = true;  // kind ssh
    QueueState queue{&jobs, Capacity{0, 1}, false};
    CHECK(pending_reason(jobs[1], queue, nullptr) == "starting (its ranks run on other hosts)");
    CHECK(pending_reason(jobs[2], queue, nullptr) == "starting (its resources are free)");
  }
  TEST_CASE("what running jobs hold, jobs elsewhere hold nothing here") {
    std::vector<JobRecord> jobs = {record(1, JobState::running, true, 2, {"0", "3"}), record(2, JobState::rescaling, false, 3),
                                   record(3, JobState::running, false, 5), record(4, JobState::succeeded, false, 2)};
    jobs[2].submitted.request.remote = true;
    Usage usage = usage_of(jobs);
    CHECK(usage.gpus_in_use == std::set<std::string>{"0", "3"});
    CHECK(usage.cpu_slots_in_use == 3);
  }
}
