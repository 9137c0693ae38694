#include "dlrun/launcher/job_store.hpp"

#include <unistd.h>

#include <cstdlib>
#include <filesystem>
#include <string>

#include <doctest/doctest.h>

using namespace dlrun::launcher;

namespace {
struct TempDir {
  std::string path;
  TempDir() {
    char pattern[] = "/tmp/dlrun-store-XXXXXX";
    path = ::mkdtemp(pattern);
  }
  ~TempDir() { std::filesystem::remove_all(path); }
};

NewJob job(const std::string& name, bool gpu, int ranks) {
  NewJob j;
  j.name = name;
  j.spec_text = "command = [\"x\"]";
  j.spec_path = "/jobs/job.toml";
  j.base_dir = "/jobs";
  j.environment = std::string("A=1\0B=2\0", 8);
  j.request = {gpu, ranks, ranks, {}};
  return j;
}
}  // namespace

TEST_SUITE("launcher::JobStore") {
  TEST_CASE("submitted jobs are pending, numbered, and survive reopening") {
    TempDir dir;
    int64_t first, second;
    {
      JobStore store(dir.path + "/jobs.db");
      first = store.submit(job("a", false, 2));
      second = store.submit(job("b", true, 1));
    }
    JobStore store(dir.path + "/jobs.db");
    CHECK(second == first + 1);
    auto a = store.get(first);
    REQUIRE(a);
    CHECK(a->name == "a");
    CHECK(a->state == JobState::pending);
    CHECK(a->submitted.environment == std::string("A=1\0B=2\0", 8));
    CHECK(a->submitted.request.max_ranks == 2);
    CHECK_FALSE(store.get(999));
  }
  TEST_CASE("a listing leaves out the job file and the environment, in both of its forms") {
    TempDir dir;
    JobStore store(dir.path + "/jobs.db");
    int64_t id = store.submit(job("a", false, 2));
    store.finish(store.submit(job("b", false, 1)), JobState::failed, 1, "x");
    for (bool all : {true, false}) {
      auto jobs = store.list(all, 5);
      REQUIRE(jobs.size() == 2);
      CHECK(jobs[0].id == id);
      CHECK(jobs[0].name == "a");
      CHECK(jobs[0].submitted.spec_path == "/jobs/job.toml");
      CHECK(jobs[0].submitted.request.max_ranks == 2);
      CHECK(jobs[0].submitted.spec_text.empty());
      CHECK(jobs[0].submitted.environment.empty());
      CHECK(jobs[1].reason == "x");
    }
    CHECK(store.get(id)->submitted.spec_text == "command = [\"x\"]");
  }
  TEST_CASE("reopen keeps finished jobs") {
    TempDir dir;
    int64_t id;
    {
      JobStore store(dir.path + "/jobs.db");
      id = store.submit(job("a", false, 1));
      store.finish(id, JobState::failed, 7, "rank 0 exited with code 7");
    }
    JobStore store(dir.path + "/jobs.db");
    auto r = store.get(id);
    CHECK(r->state == JobState::failed);
    CHECK(r->exit_code == 7);
    CHECK(r->reason == "rank 0 exited with code 7");
    CHECK(r->ended_at > 0);
  }
  TEST_CASE("only the oldest pending job may start, and GPUs are not shared") {
    TempDir dir;
    JobStore store(dir.path + "/jobs.db");
    Capacity capacity{2, 4};
    int64_t a = store.submit(job("a", true, 1));
    int64_t b = store.submit(job("b", true, 2));
    int64_t c = store.submit(job("c", true, 1));
    CHECK_FALSE(store.try_start(b, capacity, "/run/b"));  // a is older
    auto got_a = store.try_start(a, capacity, "/run/a");
    REQUIRE(got_a);
    CHECK(got_a->gpu_ids == std::vector<std::string>{"0"});
    CHECK_FALSE(store.try_start(b, capacity, "/run/b"));  // needs 2, one is free
    CHECK_FALSE(store.try_start(c, capacity, "/run/c"));  // FIFO: b first
    store.finish(a, JobState::succeeded, 0, "");
    auto got_b = store.try_start(b, capacity, "/run/b");
    REQUIRE(got_b);
    CHECK(got_b->gpu_ids == std::vector<std::string>{"0", "1"});
    CHECK(store.get(b)->state == JobState::running);
    CHECK(store.get(b)->run_dir == "/run/b");
  }
  TEST_CASE("a pending job can be cancelled, a running one not this way") {
    TempDir dir;
    JobStore store(dir.path + "/jobs.db");
    int64_t a = store.submit(job("a", false, 1));
    CHECK(store.cancel_pending(a, "by test"));
    CHECK(store.get(a)->state == JobState::cancelled);
    int64_t b = store.submit(job("b", false, 1));
    REQUIRE(store.try_start(b, Capacity{0, 2}, "/run"));
    CHECK_FALSE(store.cancel_pending(b, "by test"));
  }
  TEST_CASE("a finished job is never reopened by a late update") {
    TempDir dir;
    JobStore store(dir.path + "/jobs.db");
    int64_t a = store.submit(job("a", false, 1));
    store.finish(a, JobState::cancelled, 143, "first");
    store.finish(a, JobState::failed, 1, "second");
    CHECK(store.get(a)->state == JobState::cancelled);
    CHECK(store.get(a)->reason == "first");
  }
  TEST_CASE("sweep marks running jobs of dead supervisors lost and frees their resources") {
    TempDir dir;
    JobStore store(dir.path + "/jobs.db");
    int64_t a = store.submit(job("a", true, 1));
    ProcessIdentity dead{::getpid(), 1};  // our pid, a start time that is not ours
    REQUIRE(store.claim(a, dead));
    REQUIRE(store.try_start(a, Capacity{1, 1}, "/run"));
    auto orphans = store.sweep();
    CHECK(orphans.marked_lost == std::vector<int64_t>{a});
    auto r = store.get(a);
    CHECK(r->state == JobState::failed);
    CHECK(r->reason.find("lost") == 0);
    int64_t b = store.submit(job("b", true, 1));
    CHECK(store.try_start(b, Capacity{1, 1}, "/run"));
  }
  TEST_CASE("sweep hands back pending jobs whose supervisor died, keeps live ones") {
    TempDir dir;
    JobStore store(dir.path + "/jobs.db");
    int64_t a = store.submit(job("a", false, 1));
    int64_t b = store.submit(job("b", false, 1));
    REQUIRE(store.claim(a, ProcessIdentity{::getpid(), 1}));
    REQUIRE(store.claim(b, ProcessIdentity::self()));
    CHECK_FALSE(store.claim(b, ProcessIdentity{::getpid(), 1}));  // b's supervisor lives
    auto orphans = store.sweep();
    CHECK(orphans.pending_without_supervisor == std::vector<int64_t>{a});
    CHECK(store.claim(a, ProcessIdentity::self()));
  }
  TEST_CASE("list shows active jobs and the last finished ones") {
    TempDir dir;
    JobStore store(dir.path + "/jobs.db");
    for (int i = 0; i < 5; ++i) store.finish(store.submit(job("done", false, 1)), JobState::succeeded, 0, "");
    store.submit(job("waiting", false, 1));
    auto jobs = store.list(false, 2);
    REQUIRE(jobs.size() == 3);
    CHECK(jobs[0].id == 4);
    CHECK(jobs[2].name == "waiting");
    CHECK(store.list(true, 0).size() == 6);
  }
  TEST_CASE("states have names") {
    CHECK(to_string(JobState::rescaling) == "RESCALING");
    CHECK(parse_job_state("CANCELLED") == JobState::cancelled);
    CHECK_FALSE(parse_job_state("DONE"));
  }
}
