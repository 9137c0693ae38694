#include "dlrun/launcher/agent_plan.hpp"

#include <doctest/doctest.h>

#include "dlrun/error.hpp"
#include "dlrun/version.hpp"

using namespace dlrun::launcher;

TEST_SUITE("launcher::AgentPlan") {
  TEST_CASE("a host's plan reaches its agent whole, on one line") {
    AgentPlan plan;
    plan.job_id = "20261123-120000-ab12";
    plan.workdir = "/work/dir with spaces";
    PlanOptions& o = plan.options;
    o.gpus = GpuRequest{4, {}};
    o.gpus_label = "--gpu-ids 0,1,2,3";
    o.min_ranks = 2;
    o.run_dir = "/runs/x";
    o.log_dir = "/logs/7";
    plan.env = {{"GREETING", "hello"}, {"DLRUN_CHECKPOINT_DIR", "/ckpt"}};
    o.prefix = "[{host}:{rank}] ";
    o.prefix_enabled = false;
    o.shown_ranks = std::vector<int>{0, 3};
    o.color = ColorMode::always;
    o.grace_seconds = 2.5;
    o.tail_lines = 7;
    o.quiet = true;
    o.max_restarts = 3;
    o.watchdog_seconds = 30;
    o.gpu_binding = GpuBinding::all;
    o.master_port = 29555;
    o.check_master_port = false;
    o.command = {"python3", "train.py", "--note", "a \"quoted\"\nline"};
    const std::string text = format_agent_plan(plan);
    CHECK(text.find('\n') == std::string::npos);
    AgentPlan back = parse_agent_plan(text);
    CHECK(back.job_id == plan.job_id);
    CHECK(back.workdir == plan.workdir);
    const PlanOptions& b = back.options;
    CHECK_FALSE(b.nproc);
    REQUIRE(b.gpus);
    CHECK(b.gpus->count == 4);
    CHECK(b.gpus->ids.empty());
    CHECK(b.gpus_label == o.gpus_label);
    CHECK(b.min_ranks == 2);
    CHECK_FALSE(b.max_ranks);
    CHECK(b.run_dir == "/runs/x");
    CHECK(b.log_dir == "/logs/7");
    CHECK(back.env == plan.env);
    CHECK(b.prefix == o.prefix);
    CHECK_FALSE(b.prefix_enabled);
    CHECK(b.shown_ranks == o.shown_ranks);
    CHECK(b.color == ColorMode::always);
    CHECK(b.grace_seconds == 2.5);
    CHECK(b.tail_lines == 7);
    CHECK(b.quiet);
    CHECK(b.max_restarts == 3);
    CHECK(b.watchdog_seconds == 30);
    CHECK(b.gpu_binding == GpuBinding::all);
    CHECK(b.master_port == 29555);
    CHECK_FALSE(b.check_master_port);
    CHECK(b.command == o.command);
    AgentPlan cpu;
    cpu.options.nproc = 2;
    CHECK(parse_agent_plan(format_agent_plan(cpu)).options.nproc == 2);
    CHECK_FALSE(parse_agent_plan(format_agent_plan(cpu)).options.gpus);
  }

  TEST_CASE("a plan that is not UTF-8 is refused before anything starts, saying why") {
    AgentPlan plan;
    plan.options.command = {"./train", "caf\xe9"};
    CHECK_THROWS_WITH_AS(format_agent_plan(plan),
                         "dlrun run sends the program, its arguments and the directories to the hosts as JSON, "
                         "which needs UTF-8: one of them is not valid UTF-8",
                         dlrun::ConfigError);
  }

  TEST_CASE("an agent of another version says so") {
    std::string text = format_agent_plan(AgentPlan{});
    const std::string version = std::string("\"version\":\"") + dlrun::k_version + "\"";
    REQUIRE(text.find(version) != std::string::npos);
    text.replace(text.find(version), version.size(), "\"version\":\"0.0.1\"");
    CHECK_THROWS_WITH_AS(parse_agent_plan(text),
                         (std::string("this agent is dlrun ") + dlrun::k_version +
                          " and the launcher dlrun 0.0.1: install the same version on every host")
                             .c_str(),
                         dlrun::Error);
  }

  TEST_CASE("an assignment without a readable plan is an error that says why") {
    CHECK_THROWS_WITH_AS(parse_agent_plan(""),
                         "the launcher's assignment carries no plan (is dlrun the same version on every host?)",
                         dlrun::Error);
    CHECK_THROWS_AS(parse_agent_plan(R"({"job_id": 3})"), dlrun::Error);
  }
}
