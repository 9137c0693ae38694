#include "dlrun/launcher/plan.hpp"

#include <cstdlib>

#include <doctest/doctest.h>

#include "dlrun/error.hpp"

using namespace dlrun::launcher;

TEST_SUITE("launcher::Plan") {
  TEST_CASE("a setting is named as its user wrote it") {
    CHECK(setting_label(SettingsSource::command_line, "max_restarts", "3") == "--max-restarts 3");
    CHECK(setting_label(SettingsSource::job_file, "gpus", "0,1") == "the job's gpus (0,1)");
  }
  TEST_CASE("a job file's GPUs that cannot be had are not called --gpus") {
    ::setenv("DLRUN_FAKE_GPUS", "2", 1);
    PlanOptions options;
    options.gpus = GpuRequest{std::nullopt, {"0", "5"}};
    options.command = {"/bin/true"};
    options.source = SettingsSource::job_file;
    CHECK_THROWS_WITH_AS(make_plan(options, {}, "t"),
                         "the job's gpus (0,5): GPU 5 does not exist: this machine has 2 GPUs (0,1)",
                         dlrun::ConfigError);
    options.source = SettingsSource::command_line;
    CHECK_THROWS_WITH_AS(make_plan(options, {}, "t"), "--gpus 0,5: GPU 5 does not exist: this machine has 2 GPUs (0,1)",
                         dlrun::ConfigError);
    options.gpus_label = "--gpu-ids 0,5";  // dlrun run's agents: as the user wrote it
    CHECK_THROWS_WITH_AS(make_plan(options, {}, "t"),
                         "--gpu-ids 0,5: GPU 5 does not exist: this machine has 2 GPUs (0,1)", dlrun::ConfigError);
    ::unsetenv("DLRUN_FAKE_GPUS");
  }
}
