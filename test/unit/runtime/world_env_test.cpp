#include "world_env.hpp"

#include <doctest/doctest.h>

#include <map>
#include <memory>
#include <string>

#include "dlrun/runtime_errors.hpp"

using dlrun::runtime::read_world_env;

namespace {

dlrun::runtime::EnvLookup env_of(std::map<std::string, std::string> values) {
  auto shared = std::make_shared<std::map<std::string, std::string>>(std::move(values));
  return [shared](const char* name) -> const char* {
    auto it = shared->find(name);
    return it == shared->end() ? nullptr : it->second.c_str();
  };
}

std::string error_of(std::map<std::string, std::string> values) {
  try {
    read_world_env(env_of(std::move(values)));
  } catch (const dlrun::EnvironmentError& e) {
    CHECK(e.exit_code() == 2);
    return e.what();
  }
  return "";
}

}  // namespace

TEST_SUITE("runtime::WorldEnv") {
  TEST_CASE("no environment is a world of one") {
    auto world = read_world_env(env_of({}));
    CHECK(world.rank == 0);
    CHECK(world.world_size == 1);
    CHECK_FALSE(world.distributed());
  }

  TEST_CASE("dlrun's environment") {
    auto world = read_world_env(env_of({{"RANK", "2"},
                                        {"WORLD_SIZE", "3"},
                                        {"LOCAL_RANK", "1"},
                                        {"MASTER_ADDR", "127.0.0.1"},
                                        {"MASTER_PORT", "29511"},
                                        {"DLRUN_RESTART_COUNT", "4"},
                                        {"DLRUN_RUN_DIR", "/r"},
                                        {"DLRUN_DEVICE", "cuda"}}));
    CHECK(world.rank == 2);
    CHECK(world.world_size == 3);
    CHECK(world.local_rank == 1);
    CHECK(world.master_port == 29511);
    CHECK(world.restart_count == 4);
    CHECK(world.run_dir == "/r");
    CHECK(world.device == "cuda");
    CHECK(world.distributed());
  }

  TEST_CASE("a half-set environment names the missing variables") {
    CHECK(error_of({{"RANK", "0"}, {"WORLD_SIZE", "2"}}) ==
          "RANK and WORLD_SIZE are set but MASTER_ADDR and MASTER_PORT are not: start the program "
          "with `dlrun local` (or torchrun), or set all of RANK, WORLD_SIZE, MASTER_ADDR and "
          "MASTER_PORT; unset them all to run as a world of one");
    CHECK(error_of({{"RANK", "0"}, {"WORLD_SIZE", "2"}, {"MASTER_ADDR", "h"}})
              .rfind("RANK, WORLD_SIZE and MASTER_ADDR are set but MASTER_PORT is not", 0) == 0);
  }

  TEST_CASE("malformed values are named") {
    std::map<std::string, std::string> base{
        {"RANK", "3"}, {"WORLD_SIZE", "2"}, {"MASTER_ADDR", "h"}, {"MASTER_PORT", "1"}};
    CHECK(error_of(base) == "RANK='3' is not a whole number from 0 to 1");
    base["RANK"] = "0";
    base["MASTER_PORT"] = "http";
    CHECK(error_of(base) == "MASTER_PORT='http' is not a whole number from 1 to 65535");
    base["MASTER_PORT"] = "1";
    base["DLRUN_DEVICE"] = "gpu";
    CHECK(error_of(base) == "DLRUN_DEVICE='gpu': expected cpu or cuda (or unset)");
  }
}
