#include "dlrun/launcher/job_report.hpp"
#include "dlrun/launcher/queue_insight.hpp"

#include <doctest/doctest.h>

using namespace dlrun::launcher;

TEST_SUITE("launcher::JobReport") {
  TEST_CASE("durations read like squeue") {
    CHECK(format_duration(5) == "0:05");
    CHECK(format_duration(754) == "12:34");
    CHECK(format_duration(3723) == "1:02:03");
    CHECK(format_duration(2 * 86400 + 3 * 3600 + 4 * 60 + 5) == "2-03:04:05");
    CHECK(format_duration(-3) == "0:00");
  }
  TEST_CASE("tables are aligned") {
    CHECK(render_table({{"ID", "NAME"}, {"12", "x"}}) == "ID  NAME\n12  x\n");
  }
  TEST_CASE("a reason of several lines takes one row of the table, and all of it in the details") {
    JobRecord job;
    job.id = 74;
    job.name = "on-slurm";
    job.state = JobState::failed;
    job.reason = "sbatch exited with code 1: sbatch: error: no partition\nsbatch: error: rejected";
    const auto rows = status_rows({job}, 0);
    REQUIRE(rows.size() == 2);
    CHECK(rows[1].back() == "sbatch exited with code 1: sbatch: error: no partition …");
    CHECK(status_details(job, 0).find("sbatch: error: rejected") != std::string::npos);
  }
  TEST_CASE("the table names the GPUs other users' queues hold under it, one line for all") {
    JobRecord job;
    job.id = 3;
    job.name = "a";
    job.state = JobState::running;
    QueueInsight insight;
    const std::string plain = status_table({job}, 0, insight);
    CHECK(plain.find("Outside this queue") == std::string::npos);
    insight.gpus_elsewhere = {{"0", "user ann's dlrun job 1 (pid 5)"}, {"1", "user ann's dlrun job 1 (pid 5)"},
                              {"3", "user bob's dlrun job 7 (pid 9)"}};
    CHECK(status_table({job}, 0, insight) == plain + "\nOutside this queue: GPUs 0,1 are in use by user ann's dlrun "
                                                     "job 1 (pid 5); GPU 3 is in use by user bob's dlrun job 7 (pid 9)\n");
  }
  TEST_CASE("status exit codes") {
    CHECK(status_exit_code(JobState::succeeded) == 0);
    CHECK(status_exit_code(JobState::failed) == 1);
    CHECK(status_exit_code(JobState::cancelled) == 3);
    CHECK(status_exit_code(JobState::pending) == 4);
    CHECK(status_exit_code(JobState::running) == 5);
  }
  TEST_CASE("a job as JSON has the keys scripts need") {
    JobRecord job;
    job.id = 7;
    job.name = "say \"hi\"";
    job.state = JobState::failed;
    job.exit_code = 3;
    std::string json = job_json(job, 0);
    CHECK(json.find("\"id\":7") != std::string::npos);
    CHECK(json.find("\"name\":\"say \\\"hi\\\"\"") != std::string::npos);
    CHECK(json.find("\"state\":\"FAILED\"") != std::string::npos);
    CHECK(json.find("\"exit_code\":3") != std::string::npos);
    CHECK(json.find("\"started_at\":null") != std::string::npos);
    // Never started: no elapsed time (0 read as a start 0 s ago), as the table's "-".
    CHECK(json.find("\"elapsed_seconds\":null") != std::string::npos);
    job.started_at = 100;
    job.ended_at = 102.5;
    CHECK(job_json(job, 0).find("\"elapsed_seconds\":2.5") != std::string::npos);
  }
  TEST_CASE("a pending elastic job has no ranks yet: null, beside the range it asked for") {
    JobRecord job;
    job.id = 8;
    job.name = "elastic";
    job.submitted.request.min_ranks = 2;
    job.submitted.request.max_ranks = 4;
    std::string json = job_json(job, 0);
    CHECK(json.find("\"ranks\":null,\"gpus\":[],\"min_ranks\":2,\"max_ranks\":4") != std::string::npos);
    CHECK(status_rows({job}, 0)[1][4] == "2:4");
    job.state = JobState::running;
    job.allocation.ranks = 3;
    CHECK(job_json(job, 0).find("\"ranks\":3,") != std::string::npos);
    // A GPU job shows what it asks for while it waits, and nothing once it ended unstarted.
    job.submitted.request.uses_gpus = true;
    job.allocation = {};
    job.state = JobState::pending;
    CHECK(status_rows({job}, 0)[1][5] == "(2:4)");  // it starts on 2 (it showed 4)
    job.submitted.request.min_ranks = 4;
    CHECK(status_rows({job}, 0)[1][5] == "(4)");
    job.submitted.request.gpu_ids = {"1", "3"};  // gpus = [1, 3]: those, by number
    CHECK(status_rows({job}, 0)[1][5] == "(GPUs 1,3)");
    job.state = JobState::cancelled;
    CHECK(status_rows({job}, 0)[1][5] == "-");
  }
  TEST_CASE("a pin set by dlrun resize shows in the table, the details and the JSON") {
    JobRecord job;
    job.id = 2;
    job.name = "elastic";
    job.state = JobState::running;
    job.submitted.request = {true, 1, 4, {}};
    job.submitted.request.goodput = true;
    job.allocation.ranks = 4;
    CHECK(job_json(job, 0).find("\"pinned\":null") != std::string::npos);
    CHECK(status_rows({job}, 0)[1][12] == "-");
    job.pinned = 4;
    CHECK(job_json(job, 0).find("\"pinned\":4") != std::string::npos);
    CHECK(status_rows({job}, 0)[1][12] == "4 (pinned)");
    CHECK(status_details(job, 0).find("pinned at 4 GPUs by dlrun resize (dlrun resize 2 auto hands it back") !=
          std::string::npos);
    // An ended job is pinned no more.
    job.state = JobState::succeeded;
    CHECK(job_json(job, 0).find("\"pinned\":null") != std::string::npos);
  }
  TEST_CASE("restarts the ranks asked for count beside those after a failure") {
    JobRecord job;
    job.id = 9;
    job.name = "asks";
    job.restarts = 1;
    job.requested_restarts = 2;
    CHECK(status_rows({job}, 0)[1][6] == "3");
    CHECK(status_details(job, 0).find("restarts:") != std::string::npos);
    CHECK(status_details(job, 0).find(" 3 (1 after a failure, 2 asked for by the ranks)\n") != std::string::npos);
    const std::string json = job_json(job, 0);
    CHECK(json.find("\"restarts\":1,") != std::string::npos);
    CHECK(json.find("\"requested_restarts\":2,") != std::string::npos);
  }
}
