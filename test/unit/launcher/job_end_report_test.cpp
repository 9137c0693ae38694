#include "dlrun/launcher/job_end_report.hpp"

#include <doctest/doctest.h>

using namespace dlrun::launcher;

namespace {
JobRecord ended(JobState state, std::optional<int> code, const std::string& reason) {
  JobRecord job;
  job.id = 7;
  job.name = "train";
  job.state = state;
  job.exit_code = code;
  job.reason = reason;
  job.allocation.ranks = 2;
  job.started_at = 1000;
  job.ended_at = 1012;
  return job;
}
}  // namespace

TEST_SUITE("launcher::JobEndReport") {
  TEST_CASE("success is one line") {
    JobRecord job = ended(JobState::succeeded, 0, "");
    CHECK(job_end_report(job, {}) == "Job 7 (train) SUCCEEDED in 0:12 (2 ranks)\n");
    job.restarts = 1;
    job.resizes = 2;
    CHECK(job_end_summary(job) == "Job 7 (train) SUCCEEDED in 0:12 (2 ranks, 1 restart, 2 resizes)");
    job.requested_restarts = 3;
    CHECK(job_end_summary(job) ==
          "Job 7 (train) SUCCEEDED in 0:12 (2 ranks, 1 restart, 3 restarts the ranks asked for, 2 resizes)");
  }
  TEST_CASE("a failure names the rank, its code, and shows the end of its log") {
    JobRecord job = ended(JobState::failed, 139, "rank 1 was killed by signal 11 (SIGSEGV)");
    job.failed_rank = 1;
    job.restarts = 2;
    CHECK(failure_log_path(job, "/run/7") == "/run/7/rank-1.log");
    LogTail tail{"/run/7/rank-1.log", {"step 9", "Segmentation fault"}, true};
    CHECK(job_end_report(job, tail) ==
          "Job 7 (train) FAILED after 0:12 with exit code 139: rank 1 was killed by signal 11 (SIGSEGV) (2 restarts)\n"
          "==> last 2 lines of rank 1's log (/run/7/rank-1.log) <==\n"
          "step 9\n"
          "Segmentation fault\n");
    CHECK(job_end_report(job, {"/run/7/rank-1.log", {}, true}) ==
          "Job 7 (train) FAILED after 0:12 with exit code 139: rank 1 was killed by signal 11 (SIGSEGV) (2 restarts)\n"
          "==> rank 1's log (/run/7/rank-1.log) is empty <==\n");
    // No log: the line alone.
    CHECK(job_end_report(job, {"/run/7/rank-1.log", {}, false}) == job_end_summary(job) + "\n");
  }
  TEST_CASE("without a failing rank, the job's own output") {
    JobRecord job = ended(JobState::failed, std::nullopt, "lost: its supervisor (pid 9) died; its ranks were killed with it");
    CHECK(failure_log_path(job, "/run/7") == "/run/7/output.log");
    CHECK(job_end_report(job, {"/run/7/output.log", {"[0] hi"}, true}) ==
          "Job 7 (train) FAILED after 0:12: lost: its supervisor (pid 9) died; its ranks were killed with it\n"
          "==> last 1 line of the job's output (/run/7/output.log) <==\n[0] hi\n");
  }
  TEST_CASE("a cancelled job, and one that never started") {
    CHECK(job_end_report(ended(JobState::cancelled, 143, "stopped by SIGTERM"), {"x", {"not shown"}, true}) ==
          "Job 7 (train) CANCELLED after 0:12 with exit code 143: stopped by SIGTERM\n");
    JobRecord job = ended(JobState::cancelled, 143, "by dlrun cancel");
    job.started_at = 0;
    job.allocation.ranks = 0;
    CHECK(job_end_summary(job) == "Job 7 (train) CANCELLED before it started with exit code 143: by dlrun cancel");
  }
}
