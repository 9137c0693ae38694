#include "dlrun/launcher/gpu_selection.hpp"

#include <doctest/doctest.h>

#include "dlrun/error.hpp"

using namespace dlrun::launcher;

TEST_SUITE("launcher::GpuSelection") {
  TEST_CASE("a number is a count") {
    auto request = parse_gpu_request("4");
    REQUIRE(request.count);
    CHECK(*request.count == 4);
    CHECK(request.ids.empty());
  }
  TEST_CASE("a list names devices") {
    auto request = parse_gpu_request("0,2,3");
    CHECK_FALSE(request.count);
    CHECK(request.ids == std::vector<std::string>{"0", "2", "3"});
  }
  TEST_CASE("device= names GPUs, one by its number too") {
    auto one = parse_gpu_request("device=3");
    CHECK_FALSE(one.count.has_value());
    CHECK(one.ids == std::vector<std::string>{"3"});
    CHECK(parse_gpu_request("device=2,0").ids == std::vector<std::string>{"2", "0"});
    CHECK_THROWS_WITH_AS(parse_gpu_request("device="), "--gpus device= needs a list of GPUs, e.g. --gpus device=0,2",
                         dlrun::ConfigError);
  }

  TEST_CASE("device= lists are said as typed, and one numbered GPU is written back as device=") {
    CHECK_THROWS_WITH_AS(parse_gpu_request("device=3,3"), "--gpus device=3,3: GPU 3 is listed twice",
                         dlrun::ConfigError);
    CHECK(parse_gpu_request("device= 3").ids == std::vector<std::string>{"3"});
    CHECK(format_gpu_request(parse_gpu_request("device=4")) == "device=4");
    CHECK(format_gpu_request(parse_gpu_request("device=-1")) == "device=-1");
    CHECK(format_gpu_request(parse_gpu_request("2,0")) == "2,0");
    CHECK(format_gpu_request(parse_gpu_request("GPU-8f2a")) == "GPU-8f2a");
  }

  TEST_CASE("bad specs are refused with the reason") {
    CHECK_THROWS_WITH_AS(parse_gpu_request("0"), "--gpus 0: the count must be at least 1",
                         dlrun::ConfigError);
    CHECK_THROWS_WITH_AS(parse_gpu_request("1,,2"), "--gpus 1,,2: empty entry in the list",
                         dlrun::ConfigError);
    CHECK_THROWS_WITH_AS(parse_gpu_request("1,1"), "--gpus 1,1: GPU 1 is listed twice",
                         dlrun::ConfigError);
    CHECK_THROWS_AS(parse_gpu_request(""), dlrun::ConfigError);
  }
  TEST_CASE("CUDA_VISIBLE_DEVICES decides what is available") {
    CHECK(available_gpus(4, std::nullopt) == std::vector<std::string>{"0", "1", "2", "3"});
    CHECK(available_gpus(4, std::string("2, 3")) == std::vector<std::string>{"2", "3"});
    CHECK(available_gpus(4, std::string("")).empty());
    CHECK(parse_visible_devices("GPU-abc,GPU-def") == std::vector<std::string>{"GPU-abc", "GPU-def"});
  }
  TEST_CASE("a count takes the first available devices") {
    CHECK(select_gpus(parse_gpu_request("2"), {"1", "3", "5"}, "--gpus 2") == std::vector<std::string>{"1", "3"});
  }
  TEST_CASE("asking for more than there is names what there is") {
    CHECK_THROWS_WITH_AS(select_gpus(parse_gpu_request("3"), {"0", "1"}, "--gpus 3"),
                         "--gpus 3: only 2 GPUs available (0,1)", dlrun::ConfigError);
    CHECK_THROWS_WITH_AS(select_gpus(parse_gpu_request("0,7"), {"0", "1"}, "the job's gpus (0,7)"),
                         "the job's gpus (0,7): GPU 7 does not exist: this machine has 2 GPUs (0,1)",
                         dlrun::ConfigError);
  }
  TEST_CASE("a GPU that CUDA_VISIBLE_DEVICES hides is said to be hidden, not missing") {
    CHECK_THROWS_WITH_AS(select_gpus(parse_gpu_request("1,2"), {"2", "3"}, "--gpus 1,2", std::string("2,3")),
                         "--gpus 1,2: GPU 1 is not visible: CUDA_VISIBLE_DEVICES=2,3 (unset it to choose among all "
                         "of this machine's GPUs)",
                         dlrun::ConfigError);
    CHECK_THROWS_WITH_AS(select_gpus(parse_gpu_request("3"), {"2", "3"}, "--gpus 3", std::string("2,3")),
                         "--gpus 3: only 2 GPUs available (CUDA_VISIBLE_DEVICES=2,3); a number alone is a count: GPU 3 alone is "
                         "--gpus device=3", dlrun::ConfigError);
  }
  TEST_CASE("a list of GPU ids for another option") {
    CHECK(parse_gpu_ids("2", "--gpu-ids") == std::vector<std::string>{"2"});  // one GPU, not a count
    CHECK(parse_gpu_ids("3,0", "--gpu-ids") == std::vector<std::string>{"3", "0"});
    CHECK_THROWS_WITH_AS(parse_gpu_ids("0,0", "--gpu-ids"), "--gpu-ids 0,0: GPU 0 is listed twice", dlrun::ConfigError);
  }
  TEST_CASE("a list keeps the user's order") {
    CHECK(select_gpus(parse_gpu_request("3,1"), {"0", "1", "2", "3"}, "--gpus 3,1") ==
          std::vector<std::string>{"3", "1"});
  }
}
