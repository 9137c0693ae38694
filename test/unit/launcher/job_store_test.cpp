#include "dlrun/launcher/job_store.hpp"

#include <unistd.h>

#include <chrono>
#include <cstdlib>
#include <filesystem>
#include <string>
#include <thread>

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
  TEST_CASE("a store made anew beside older run directories numbers its jobs after them") {
    TempDir dir;
    std::filesystem::create_directories(dir.path + "/runs/7");
    std::filesystem::create_directories(dir.path + "/jobs/12");
    std::filesystem::create_directories(dir.path + "/runs/20261125-045853-1ffe");  // a time-stamped id
    std::filesystem::create_directory_symlink("/nonexistent", dir.path + "/runs/9");  // a dangling link
    {
      JobStore store(dir.path + "/jobs.db");
      CHECK(store.submit(job("a", false, 1)) == 13);
    }
    // Once made, the store keeps its own numbering, whatever appears beside it.
    std::filesystem::create_directories(dir.path + "/runs/40");
    JobStore store(dir.path + "/jobs.db");
    CHECK(store.submit(job("b", false, 1)) == 14);
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
  TEST_CASE("a job's end keeps the failing rank and its last metrics, restarts and resizes apart") {
    TempDir dir;
    JobStore store(dir.path + "/jobs.db");
    int64_t id = store.submit(job("a", false, 2));
    store.set_restarts(id, 1, 3, 2);
    MetricsSnapshot metrics;
    metrics.global_batch = 512;
    metrics.samples_per_sec = 1234.5;
    store.finish(id, JobState::failed, 3, "rank 1 exited with code 3", {1, metrics, std::nullopt});
    auto r = store.get(id);
    CHECK((r->restarts == 1 && r->resizes == 3 && r->requested_restarts == 2));
    CHECK(r->failed_rank == 1);
    CHECK(r->final_metrics.global_batch == 512);
    CHECK(r->final_metrics.samples_per_sec == 1234.5);
    CHECK_FALSE(r->final_metrics.goodput);
    auto listed = store.list(true, 0);
    CHECK(listed[0].failed_rank == 1);
    CHECK(listed[0].final_metrics.global_batch == 512);
    int64_t other = store.submit(job("b", false, 1));
    store.finish(other, JobState::succeeded, 0, "");
    CHECK_FALSE(store.get(other)->failed_rank);
    CHECK(store.get(other)->final_metrics.empty());
    metrics.goodput = 7;
    store.set_final_metrics(other, metrics);
    CHECK(store.get(other)->final_metrics.goodput == 7);
  }
  TEST_CASE("a store from before the newer columns gets them, its rows their defaults") {
    TempDir dir;
    const std::string path = dir.path + "/jobs.db";
    sqlite3* db = nullptr;
    REQUIRE(sqlite3_open(path.c_str(), &db) == SQLITE_OK);
    // The jobs table as the first version wrote it, with one finished job.
    const char* old = R"sql(
      CREATE TABLE jobs (id INTEGER PRIMARY KEY AUTOINCREMENT, name TEXT NOT NULL, state TEXT NOT NULL,
        spec_text TEXT NOT NULL, spec_path TEXT NOT NULL, base_dir TEXT NOT NULL, environment BLOB NOT NULL,
        uses_gpus INTEGER NOT NULL, remote INTEGER NOT NULL DEFAULT 0, slurm INTEGER NOT NULL DEFAULT 0,
        slurm_id INTEGER NOT NULL DEFAULT 0, min_ranks INTEGER NOT NULL, max_ranks INTEGER NOT NULL,
        gpu_request TEXT NOT NULL DEFAULT '', ranks INTEGER NOT NULL DEFAULT 0, gpu_ids TEXT NOT NULL DEFAULT '',
        submitted_at REAL NOT NULL, started_at REAL NOT NULL DEFAULT 0, ended_at REAL NOT NULL DEFAULT 0,
        exit_code INTEGER, reason TEXT NOT NULL DEFAULT '', restarts INTEGER NOT NULL DEFAULT 0,
        run_dir TEXT NOT NULL DEFAULT '', supervisor_pid INTEGER NOT NULL DEFAULT 0,
        supervisor_start INTEGER NOT NULL DEFAULT 0);
      INSERT INTO jobs (name, state, spec_text, spec_path, base_dir, environment, uses_gpus, min_ranks, max_ranks,
        submitted_at, exit_code, restarts) VALUES ('old', 'FAILED', '', '/j.toml', '/', x'', 0, 1, 1, 1, 3, 2);
    )sql";
    REQUIRE(sqlite3_exec(db, old, nullptr, nullptr, nullptr) == SQLITE_OK);
    sqlite3_close(db);
    JobStore store(path);
    auto r = store.get(1);
    REQUIRE(r);
    CHECK((r->name == "old" && r->exit_code == 3 && r->restarts == 2 && r->resizes == 0));
    CHECK_FALSE(r->failed_rank);
    CHECK(r->final_metrics.empty());
    CHECK(r->submitted.owner_uid == -1);
    CHECK(store.submit(job("new", false, 1)) == 2);
  }
  TEST_CASE("a store of schema version 2 gets the restarts the ranks asked for, 0 for its jobs") {
    TempDir dir;
    const std::string path = dir.path + "/jobs.db";
    {
      JobStore store(path);
      store.set_restarts(store.submit(job("v2", false, 1)), 1, 2, 3);
    }
    sqlite3* db = nullptr;
    REQUIRE(sqlite3_open(path.c_str(), &db) == SQLITE_OK);
    REQUIRE(sqlite3_exec(db, "ALTER TABLE jobs DROP COLUMN requested_restarts; PRAGMA user_version = 2;", nullptr,
                         nullptr, nullptr) == SQLITE_OK);
    sqlite3_close(db);
    JobStore store(path);
    auto r = store.get(1);
    REQUIRE(r);
    CHECK((r->restarts == 1 && r->resizes == 2 && r->requested_restarts == 0));
    store.set_restarts(1, 1, 2, 4);
    CHECK(store.get(1)->requested_restarts == 4);
  }
  TEST_CASE("a store of schema version 3 gets a result column, empty for its jobs, and a result is kept") {
    TempDir dir;
    const std::string path = dir.path + "/jobs.db";
    {
      JobStore store(path);
      store.submit(job("v3", false, 1));
    }
    sqlite3* db = nullptr;
    REQUIRE(sqlite3_open(path.c_str(), &db) == SQLITE_OK);
    REQUIRE(sqlite3_exec(db, "ALTER TABLE jobs DROP COLUMN result; PRAGMA user_version = 3;", nullptr, nullptr,
                         nullptr) == SQLITE_OK);
    sqlite3_close(db);
    JobStore store(path);
    CHECK_FALSE(store.get(1)->result);
    store.set_result(1, R"({"test_accuracy":0.88})");
    CHECK(store.get(1)->result == std::optional<std::string>(R"({"test_accuracy":0.88})"));
    CHECK(store.list(true, 0).front().result == std::optional<std::string>(R"({"test_accuracy":0.88})"));
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
  TEST_CASE("GPU jobs and CPU jobs queue apart: a CPU job does not wait behind a GPU job") {
    TempDir dir;
    JobStore store(dir.path + "/jobs.db");
    Capacity capacity{1, 2};
    int64_t wide = store.submit(job("wide", true, 2));  // never fits one GPU while it waits
    int64_t cpu = store.submit(job("cpu", false, 2));
    int64_t gpu = store.submit(job("gpu", true, 1));
    CHECK_FALSE(store.try_start(wide, capacity, "/run/wide"));
    CHECK(store.try_start(cpu, capacity, "/run/cpu"));
    CHECK_FALSE(store.try_start(gpu, capacity, "/run/gpu"));  // behind wide
  }
  TEST_CASE("a started job given back to the queue waits again, its resources free") {
    TempDir dir;
    JobStore store(dir.path + "/jobs.db");
    Capacity capacity{2, 4};
    int64_t a = store.submit(job("a", true, 2));
    REQUIRE(store.try_start(a, capacity, "/run/a"));
    CHECK(store.requeue(a, "GPU 0 is in use by user bob's dlrun job 3"));
    auto back = store.get(a);
    CHECK(back->state == JobState::pending);
    CHECK(back->allocation.gpu_ids.empty());
    CHECK(back->reason == "GPU 0 is in use by user bob's dlrun job 3");
    CHECK(store.try_start(a, capacity, "/run/a"));  // its GPUs were free again
    store.finish(a, JobState::cancelled, 143, "by dlrun cancel");
    CHECK_FALSE(store.requeue(a, "too late"));
    CHECK(store.get(a)->state == JobState::cancelled);
  }
  TEST_CASE("a grow takes neither this store's GPUs in use nor those another store's jobs hold") {
    TempDir dir;
    JobStore store(dir.path + "/jobs.db");
    Capacity capacity{4, 4};
    NewJob elastic = job("e", true, 3);
    elastic.request.min_ranks = 1;
    int64_t e = store.submit(elastic);
    int64_t other = store.submit(job("o", true, 1));
    REQUIRE(store.start_scheduled(e, 1, capacity, "/run/e")->gpu_ids == std::vector<std::string>{"0"});
    REQUIRE(store.try_start(other, capacity, "/run/o")->gpu_ids == std::vector<std::string>{"1"});
    capacity.gpus_elsewhere = {{"2", "user bob's dlrun job 7 (pid 99)"}};
    CHECK_FALSE(store.resize_allocation(e, 3, capacity, "grow"));  // only 3 is free
    CHECK(store.get(e)->allocation.gpu_ids == std::vector<std::string>{"0"});
    auto grown = store.resize_allocation(e, 2, capacity, "grow");
    REQUIRE(grown);
    CHECK(grown->gpu_ids == std::vector<std::string>{"0", "3"});
    CHECK_FALSE(store.start_scheduled(store.submit(job("n", true, 1)), 1, capacity, "/run/n"));
  }
  TEST_CASE("a job whose ranks run elsewhere (Slurm, kind ssh) neither waits in order nor holds the queue up") {
    TempDir dir;
    JobStore store(dir.path + "/jobs.db");
    Capacity capacity{0, 2};
    NewJob in_slurm = job("s", false, 8);
    in_slurm.slurm = true;  // pending in Slurm's queue for as long as Slurm likes
    in_slurm.request.remote = true;
    store.submit(in_slurm);
    int64_t big = store.submit(job("big", false, 4));  // never fits two slots
    NewJob over_ssh = job("r", false, 3);
    over_ssh.request.remote = true;
    int64_t remote = store.submit(over_ssh);
    int64_t small = store.submit(job("small", false, 1));
    CHECK(store.try_start(remote, capacity, "/run/r"));  // behind nothing
    CHECK(store.get(remote)->state == JobState::running);
    CHECK_FALSE(store.try_start(small, capacity, "/run/small"));  // behind big, not the others
    store.cancel_pending(big, "test", 143);
    CHECK(store.try_start(small, capacity, "/run/small"));
  }
  TEST_CASE("a pending job can be cancelled, a running one not this way") {
    TempDir dir;
    JobStore store(dir.path + "/jobs.db");
    int64_t a = store.submit(job("a", false, 1));
    CHECK(store.cancel_pending(a, "by test", 143));
    CHECK(store.get(a)->state == JobState::cancelled);
    CHECK(store.get(a)->exit_code == 143);
    int64_t b = store.submit(job("b", false, 1));
    REQUIRE(store.try_start(b, Capacity{0, 2}, "/run"));
    CHECK_FALSE(store.cancel_pending(b, "by test", 143));
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
    CHECK(r->exit_code == 70);
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
  TEST_CASE("a window of the allocation history holds what each job held when it began") {
    TempDir dir;
    JobStore store(dir.path + "/jobs.db");
    const int64_t a = store.submit(job("a", true, 2));
    const int64_t b = store.submit(job("b", true, 1));
    Capacity capacity{4, 2};
    REQUIRE(store.try_start(a, capacity, dir.path + "/a"));
    REQUIRE(store.try_start(b, capacity, dir.path + "/b"));
    store.finish(b, JobState::succeeded, 0, "");
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
    const double later = now_seconds();
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
    store.set_allocation(a, {1, {"0"}}, "scheduler");
    // a's start (it still held 2 GPUs then) and its shrink; b had ended: nothing of it.
    auto events = store.allocation_history(later);
    REQUIRE(events.size() == 2);
    CHECK((events[0].job == a && events[0].ranks == 2 && events[0].at < later));
    CHECK((events[1].job == a && events[1].ranks == 1 && events[1].at >= later));
    store.finish(a, JobState::succeeded, 0, "");
    CHECK(store.allocation_history(now_seconds() + 1).empty());
  }
  TEST_CASE("states have names") {
    CHECK(to_string(JobState::rescaling) == "RESCALING");
    CHECK(parse_job_state("CANCELLED") == JobState::cancelled);
    CHECK_FALSE(parse_job_state("DONE"));
  }
  TEST_CASE("the scheduler's side: scheduled starts, the allocation history, pins and the lease") {
    TempDir dir;
    JobStore store(dir.path + "/jobs.db");
    NewJob elastic = job("a", true, 1);
    elastic.request.max_ranks = 4;
    elastic.request.goodput = true;
    const int64_t a = store.submit(elastic);
    const int64_t b = store.submit(job("b", true, 1));
    Capacity capacity{4, 2};
    CHECK(store.has_active_goodput_jobs());
    // A start of exactly the ranks the scheduler chose, not more: b (fifo) finds one GPU free.
    auto started = store.start_scheduled(a, 3, capacity, dir.path + "/a");
    REQUIRE(started);
    CHECK(started->gpu_ids == std::vector<std::string>{"0", "1", "2"});
    CHECK_FALSE(store.start_scheduled(a, 3, capacity, dir.path + "/a"));  // not pending any more
    CHECK(store.try_start(b, capacity, dir.path + "/b")->gpu_ids == std::vector<std::string>{"3"});
    // A shrink written once its ranks stopped; its time is the job's new size's.
    store.set_allocation(a, {2, {"0", "1"}}, "scheduler");
    auto record = store.get(a);
    CHECK(record->allocation.ranks == 2);
    CHECK(record->sized_since() >= record->started_at);
    store.set_pinned(a, 2);
    CHECK(store.get(a)->pinned == 2);
    store.finish(b, JobState::succeeded, 0, "");
    store.finish(a, JobState::succeeded, 0, "");
    CHECK_FALSE(store.has_active_goodput_jobs());
    auto events = store.allocation_history();
    REQUIRE(events.size() == 5);
    CHECK((events[0].job == a && events[0].ranks == 3 && events[0].cause == "start" && events[0].name == "a"));
    CHECK((events[1].job == b && events[1].gpu_ids == std::vector<std::string>{"3"}));
    CHECK((events[2].job == a && events[2].ranks == 2 && events[2].cause == "scheduler"));
    CHECK((events[3].job == b && events[3].ranks == 0 && events[3].cause == "end"));
    CHECK((events[4].job == a && events[4].ranks == 0));
    CHECK(store.allocation_history(events[4].at + 1).empty());
    // The lease: one holder at a time; a dead holder's lease is taken over.
    const ProcessIdentity me = ProcessIdentity::self();
    const ProcessIdentity dead{me.pid, me.start_time + 1};  // the same pid, another process
    CHECK(store.take_scheduler_lease(dead));  // nobody held it
    CHECK_FALSE(store.scheduler_lease_holder());  // ... and it is not alive
    CHECK(store.take_scheduler_lease(me));
    CHECK(store.take_scheduler_lease(me));  // again: still mine
    CHECK(store.scheduler_lease_holder()->pid == me.pid);
    store.release_scheduler_lease(dead);  // not its to give back
    CHECK(store.scheduler_lease_holder());
    store.release_scheduler_lease(me);
    CHECK_FALSE(store.scheduler_lease_holder());
  }
}

TEST_SUITE("launcher::JobStore foreground") {
  NewJob foreground(const std::string& name, bool gpu) {
    NewJob j;
    j.name = name;
    j.spec_text = R"({"command_line":["--nproc","2","./train"],"grace":10})";
    j.base_dir = "/work";
    j.request = {gpu, 1, 1, {}};
    j.origin = JobOrigin::local;
    return j;
  }

  TEST_CASE("a foreground run is RUNNING from its start, numbered with submitted jobs") {
    TempDir dir;
    JobStore store(dir.path + "/jobs.db");
    int64_t submitted = store.submit(job("queued", false, 1));
    int64_t run = store.record_foreground(foreground("train", false), ProcessIdentity::self());
    CHECK(run == submitted + 1);
    auto record = store.get(run);
    CHECK(record->state == JobState::running);
    CHECK(record->submitted.origin == JobOrigin::local);
    CHECK(record->started_at > 0);
    CHECK(record->supervisor.pid == ::getpid());
    CHECK(store.get(submitted)->submitted.origin == JobOrigin::submit);
    store.set_foreground_start(run, {2, {}}, "/runs/2", 1, 3);
    record = store.get(run);
    CHECK(record->allocation.ranks == 2);
    CHECK(record->run_dir == "/runs/2");
    CHECK(record->submitted.request.min_ranks == 1);
    CHECK(record->submitted.request.max_ranks == 3);
    CHECK(store.find_by_name("train")->id == run);
    CHECK_FALSE(store.find_by_name("nosuch"));
  }

  TEST_CASE("its GPUs are held against queued jobs, its CPU ranks take no slot") {
    TempDir dir;
    JobStore store(dir.path + "/jobs.db");
    int64_t gpu_run = store.record_foreground(foreground("gpu", true), ProcessIdentity::self());
    store.set_foreground_start(gpu_run, {1, {"0"}}, "/runs/1", 1, 1);
    int64_t cpu_run = store.record_foreground(foreground("cpu", false), ProcessIdentity::self());
    store.set_foreground_start(cpu_run, {4, {}}, "/runs/2", 4, 4);
    Capacity capacity{1, 4};
    int64_t gpu_job = store.submit(job("g", true, 1));
    CHECK_FALSE(store.try_start(gpu_job, capacity, "/run/g"));  // GPU 0 is the run's
    store.finish(gpu_run, JobState::succeeded, 0, "");
    CHECK(store.try_start(gpu_job, capacity, "/run/g"));
    int64_t cpu_job = store.submit(job("c", false, 4));
    CHECK(store.try_start(cpu_job, capacity, "/run/c"));
  }

  TEST_CASE("reopen takes an ended job up again, never a running one, and forget removes a job") {
    TempDir dir;
    JobStore store(dir.path + "/jobs.db");
    int64_t run = store.record_foreground(foreground("train", false), ProcessIdentity::self());
    CHECK_FALSE(store.reopen(run, ProcessIdentity::self(), "{}"));
    store.finish(run, JobState::cancelled, 130, "stopped by SIGINT", {1, {}, std::nullopt});
    CHECK(store.reopen(run, ProcessIdentity::self(), R"({"command_line":["x"]})"));
    auto record = store.get(run);
    CHECK(record->state == JobState::running);
    CHECK_FALSE(record->exit_code);
    CHECK(record->reason.empty());
    CHECK_FALSE(record->failed_rank);
    CHECK(record->ended_at == 0);
    CHECK(record->submitted.spec_text == R"({"command_line":["x"]})");
    store.forget(run);
    CHECK_FALSE(store.get(run));
  }

  TEST_CASE("ended_before leaves the newest ended jobs and the active ones") {
    TempDir dir;
    JobStore store(dir.path + "/jobs.db");
    std::vector<int64_t> ids;
    for (int i = 0; i < 4; ++i) {
      ids.push_back(store.record_foreground(foreground("j", false), ProcessIdentity::self()));
      if (i < 3) store.finish(ids.back(), JobState::succeeded, 0, "");
    }
    const double later = now_seconds() + 10;
    std::vector<int64_t> old;
    for (const auto& j : store.ended_before(later, 1)) old.push_back(j.id);
    CHECK(old == std::vector<int64_t>{ids[1], ids[0]});
    CHECK(store.ended_before(later - 3600, 0).empty());
  }
}
