#include "dlrun/launcher/rank_env.hpp"

#include <doctest/doctest.h>

#include <algorithm>

using namespace dlrun::launcher;

namespace {
NodePlanInput two_ranks() {
  NodePlanInput in;
  in.local_world_size = 2;
  in.world_size = 2;
  in.master_addr = "127.0.0.1";
  in.master_port = 41000;
  in.run_dir = "/runs/j1";
  in.job_id = "j1";
  in.cores = 8;
  in.base = {{"PATH", "/usr/bin"}, {"RANK", "stale"}};
  return in;
}
}  // namespace

TEST_SUITE("launcher::RankEnv") {
  TEST_CASE("each rank gets the torch.distributed env:// variables") {
    auto ranks = plan_node_ranks(two_ranks());
    REQUIRE(ranks.size() == 2);
    const auto& env = ranks[1].env;
    CHECK(ranks[1].rank == 1);
    CHECK(env.at("RANK") == "1");
    CHECK(env.at("LOCAL_RANK") == "1");
    CHECK(env.at("WORLD_SIZE") == "2");
    CHECK(env.at("LOCAL_WORLD_SIZE") == "2");
    CHECK(env.at("NODE_RANK") == "0");
    CHECK(env.at("GROUP_RANK") == "0");
    CHECK(env.at("MASTER_ADDR") == "127.0.0.1");
    CHECK(env.at("MASTER_PORT") == "41000");
    CHECK(env.at("DLRUN_RUN_DIR") == "/runs/j1");
    CHECK(env.at("DLRUN_RESULT_FILE") == "/runs/j1/result.json");
    CHECK(env.at("DLRUN_JOB_ID") == "j1");
    CHECK(env.at("DLRUN_RESTART_COUNT") == "0");
    CHECK(env.at("PATH") == "/usr/bin");
  }
  TEST_CASE("each rank gets torchrun's other variables") {
    auto in = two_ranks();
    in.node_rank = 1;
    in.num_nodes = 3;
    in.first_rank = 4;
    in.world_size = 6;
    in.restart_count = 2;
    in.max_restarts = 5;
    auto ranks = plan_node_ranks(in);
    const auto& env = ranks[1].env;
    CHECK(env.at("GROUP_RANK") == "1");
    CHECK(env.at("GROUP_WORLD_SIZE") == "3");
    CHECK(env.at("LOCAL_WORLD_SIZE") == "2");
    CHECK(env.at("ROLE_NAME") == "default");
    CHECK(env.at("ROLE_RANK") == "5");
    CHECK(env.at("ROLE_WORLD_SIZE") == "6");
    CHECK(env.at("TORCHELASTIC_RUN_ID") == "j1");
    CHECK(env.at("TORCHELASTIC_RESTART_COUNT") == "2");
    CHECK(env.at("TORCHELASTIC_MAX_RESTARTS") == "5");
    CHECK(env.at("TORCHELASTIC_ERROR_FILE") == "/runs/j1/rank-5.error.json");
  }
  TEST_CASE("OMP_NUM_THREADS divides the cores unless the user set it") {
    auto ranks = plan_node_ranks(two_ranks());
    CHECK(ranks[0].env.at("OMP_NUM_THREADS") == "4");
    auto in = two_ranks();
    in.base["OMP_NUM_THREADS"] = "7";
    CHECK(plan_node_ranks(in)[0].env.at("OMP_NUM_THREADS") == "7");
    CHECK(threads_per_rank(2, 8) == 1);
  }
  TEST_CASE("Python's output is unbuffered unless the user said otherwise") {
    CHECK(plan_node_ranks(two_ranks())[1].env.at("PYTHONUNBUFFERED") == "1");
    auto in = two_ranks();
    in.base["PYTHONUNBUFFERED"] = "";  // buffered, as the user asked
    CHECK(plan_node_ranks(in)[0].env.at("PYTHONUNBUFFERED").empty());
    // Not reserved: job.toml's [env] may set it.
    const auto reserved = per_rank_variables();
    CHECK(std::find(reserved.begin(), reserved.end(), "PYTHONUNBUFFERED") == reserved.end());
  }
  TEST_CASE("ranks on a later node are numbered after the earlier nodes") {
    auto in = two_ranks();
    in.node_rank = 1;
    in.num_nodes = 2;
    in.first_rank = 2;
    in.world_size = 4;
    auto ranks = plan_node_ranks(in);
    CHECK(ranks[0].env.at("RANK") == "2");
    CHECK(ranks[1].env.at("RANK") == "3");
    CHECK(ranks[1].env.at("LOCAL_RANK") == "1");
    CHECK(ranks[1].env.at("NODE_RANK") == "1");
  }
  TEST_CASE("GPU ranks see their own device, or all with GpuBinding::all") {
    auto in = two_ranks();
    in.gpu_ids = {"2", "5"};
    auto ranks = plan_node_ranks(in);
    CHECK(ranks[0].env.at("CUDA_VISIBLE_DEVICES") == "2");
    CHECK(ranks[1].env.at("CUDA_VISIBLE_DEVICES") == "5");
    CHECK(ranks[1].env.at("DLRUN_DEVICE") == "cuda");
    in.gpu_binding = GpuBinding::all;
    CHECK(plan_node_ranks(in)[1].env.at("CUDA_VISIBLE_DEVICES") == "2,5");
  }
  TEST_CASE("CPU ranks keep the user's CUDA_VISIBLE_DEVICES as it is") {
    auto in = two_ranks();
    in.base["CUDA_VISIBLE_DEVICES"] = "";
    CHECK(plan_node_ranks(in)[0].env.at("CUDA_VISIBLE_DEVICES") == "");
    CHECK(plan_node_ranks(in)[0].env.at("DLRUN_DEVICE") == "cpu");
  }
  TEST_CASE("what every rank gets whatever the environment says: what job.toml's [env] may not set") {
    const std::vector<std::string> names = per_rank_variables();
    CHECK(std::is_sorted(names.begin(), names.end()));
    for (const char* name : {"RANK", "LOCAL_RANK", "WORLD_SIZE", "MASTER_ADDR", "MASTER_PORT",
                             "TORCHELASTIC_RUN_ID", "DLRUN_RUN_DIR", "DLRUN_JOB_ID", "DLRUN_DEVICE"}) {
      CAPTURE(name);
      CHECK(std::binary_search(names.begin(), names.end(), std::string(name)));
    }
    // Kept when given, or set for GPU ranks only: the user's to choose otherwise.
    for (const char* name : {"OMP_NUM_THREADS", "CUDA_VISIBLE_DEVICES"}) {
      CAPTURE(name);
      CHECK_FALSE(std::binary_search(names.begin(), names.end(), std::string(name)));
    }
  }
}
