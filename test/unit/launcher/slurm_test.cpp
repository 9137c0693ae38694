#include "dlrun/launcher/slurm.hpp"

#include <doctest/doctest.h>

#include <ctime>

using namespace dlrun::launcher;

TEST_SUITE("launcher::Slurm") {
  TEST_CASE("scontrol's line in dlrun's terms, a cancelled job exiting 143 whenever it was cancelled") {
    auto done = parse_scontrol_job("JobId=7 JobState=COMPLETED Reason=None ExitCode=0:0");
    REQUIRE(done);
    CHECK((done->state == JobState::succeeded && done->exit_code == 0 && done->reason.empty()));
    auto failed = parse_scontrol_job("JobId=7 JobState=FAILED Reason=NonZeroExitCode ExitCode=3:0");
    CHECK((failed->state == JobState::failed && failed->exit_code == 3 && failed->reason == "NonZeroExitCode"));
    CHECK(parse_scontrol_job("JobId=7 JobState=TIMEOUT Reason=TimeLimit ExitCode=0:15")->exit_code == 143);
    // Cancelled while pending: Slurm says 0:0 and keeps the reason it was waiting for; CI
    // read exit code 0 (submit --wait went green).
    auto held = parse_scontrol_job("JobId=7 JobState=CANCELLED Reason=BeginTime ExitCode=0:0");
    CHECK((held->state == JobState::cancelled && held->exit_code == 143 && held->reason == "Slurm: CANCELLED"));
    CHECK(parse_scontrol_job("JobId=7 JobState=CANCELLED Reason=None ExitCode=0:15")->exit_code == 143);
    CHECK_FALSE(parse_scontrol_job("slurm_load_jobs error: Invalid job id specified"));
    // When Slurm started it (status and --wait counted from when dlrun first looked), and what
    // a pending job waits for, which says when it cannot start as it is.
    auto running = parse_scontrol_job("JobId=7 JobState=RUNNING Reason=None StartTime=2026-11-29T06:22:43 EndTime=Unknown");
    std::tm tm{};
    tm.tm_year = 126, tm.tm_mon = 10, tm.tm_mday = 29, tm.tm_hour = 6, tm.tm_min = 22, tm.tm_sec = 43, tm.tm_isdst = -1;
    CHECK(running->started_at == static_cast<double>(std::mktime(&tm)));
    CHECK(parse_scontrol_job("JobId=7 JobState=RUNNING StartTime=1795434291")->started_at == 1795434291.0);
    auto pending = parse_scontrol_job("JobId=7 JobState=PENDING Reason=PartitionNodeLimit StartTime=Unknown");
    CHECK((pending->state == JobState::pending && pending->reason == "PartitionNodeLimit" && !pending->started_at));
    CHECK(slurm_never_hint(pending->reason) == "it asks for more nodes than its partition allows");
    CHECK(slurm_never_hint("Priority").empty());
  }

  TEST_CASE("a job Slurm could not be asked about is not ended, one it has forgotten is") {
    const SlurmCommandResult running{true, "JobId=7 JobState=RUNNING Reason=None ExitCode=0:0", ""};
    auto answer = interpret_slurm_query(running, std::nullopt);
    CHECK((answer.info && answer.info->state == JobState::running && !answer.gone));
    // The controller restarting, or scontrol not in PATH: nothing is known (the job was made
    // FAILED for good, and dlrun clean then removed the directory it was running in).
    const SlurmCommandResult down{false, "", "slurm_load_jobs error: Unable to contact slurm controller (connect failure)"};
    answer = interpret_slurm_query(down, std::nullopt);
    CHECK((!answer.info && !answer.gone));
    CHECK(answer.why == "slurm_load_jobs error: Unable to contact slurm controller (connect failure)");
    answer = interpret_slurm_query({false, "", "program 'scontrol' not found in PATH"}, std::nullopt);
    CHECK((!answer.info && !answer.gone));
    // Forgotten by slurmctld (MinJobAge): the accounting record, if there is one.
    const SlurmCommandResult forgotten{false, "", "slurm_load_jobs error: Invalid job id specified"};
    answer = interpret_slurm_query(forgotten, SlurmCommandResult{true, "COMPLETED|0:0\n", ""});
    CHECK((answer.info && answer.info->state == JobState::succeeded && answer.info->exit_code == 0));
    answer = interpret_slurm_query(forgotten, SlurmCommandResult{true, "", ""});
    CHECK((!answer.info && answer.gone));
    answer = interpret_slurm_query(forgotten, SlurmCommandResult{false, "", "sacct: error: Slurm accounting storage is disabled"});
    CHECK((!answer.info && answer.gone));
    // The accounting database down: that is not "no record".
    answer = interpret_slurm_query(forgotten,
                                   SlurmCommandResult{false, "", "sacct: error: Problem talking to the database: Connection refused"});
    CHECK((!answer.info && !answer.gone));
  }
}
