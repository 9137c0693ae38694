#include "dlrun/launcher/scheduling_policy.hpp"

#include <doctest/doctest.h>

using namespace dlrun::launcher;

namespace {
ResourceRequest gpus(int min, int max) { return {true, min, max, {}}; }
ResourceRequest cpus(int min, int max) { return {false, min, max, {}}; }
}  // namespace

TEST_SUITE("launcher::SchedulingPolicy") {
  Capacity machine{4, 8};

  TEST_CASE("free GPUs are handed out lowest index first") {
    Usage usage{{"0", "2"}, 0};
    auto a = fit(gpus(2, 2), machine, usage);
    REQUIRE(a);
    CHECK(a->gpu_ids == std::vector<std::string>{"1", "3"});
    CHECK(a->ranks == 2);
  }
  TEST_CASE("a GPU in use is never handed out again") {
    Usage usage{{"0", "1", "2"}, 0};
    CHECK_FALSE(fit(gpus(2, 2), machine, usage));
    ResourceRequest exact{true, 1, 1, {"1"}};
    CHECK_FALSE(fit(exact, machine, usage));
    ResourceRequest free_one{true, 1, 1, {"3"}};
    CHECK(fit(free_one, machine, usage)->gpu_ids == std::vector<std::string>{"3"});
  }
  TEST_CASE("GPUs another store's jobs hold are handed out neither by count nor by name") {
    Capacity shared = machine;
    shared.gpus_elsewhere = {{"1", "user bob's dlrun job 7 (pid 99)"}, {"GPU-abc", "someone"}};
    CHECK(shared.gpus_free_of_others() == 3);  // a UUID is not one of 0 … 3
    CHECK(shared.gpus_free_of_others({"1"}) == 4);  // shared with a job of this store: counted once, as its
    CHECK(fit(gpus(1, 4), shared, Usage{{"0"}, 0})->gpu_ids == std::vector<std::string>{"2", "3"});
    CHECK_FALSE(fit(gpus(4, 4), shared, Usage{}));
    ResourceRequest named{true, 1, 1, {"1"}};
    CHECK_FALSE(fit(named, shared, Usage{}));
    CHECK(never_fits(gpus(4, 4), shared).empty());  // it may fit once bob's job ends
  }
  TEST_CASE("CPU slots add up") {
    CHECK(fit(cpus(4, 4), machine, Usage{{}, 4})->ranks == 4);
    CHECK_FALSE(fit(cpus(5, 5), machine, Usage{{}, 4}));
  }
  TEST_CASE("elastic requests take what fits, at least min") {
    CHECK(fit(gpus(1, 4), machine, Usage{{"0"}, 0})->ranks == 3);
    CHECK(fit(cpus(2, 6), machine, Usage{{}, 3})->ranks == 5);
    CHECK_FALSE(fit(cpus(6, 8), machine, Usage{{}, 3}));
  }
  TEST_CASE("requests that can never fit say why") {
    CHECK(never_fits(gpus(5, 5), machine) == "needs 5 GPUs, this machine has 4");
    CHECK(never_fits(cpus(9, 9), machine) ==
          "needs 9 CPU slots, this machine has 8 (cpu_slots in config.toml's [queue], or DLRUN_CPU_SLOTS, allows more)");
    ResourceRequest missing{true, 1, 1, {"7"}};
    CHECK(never_fits(missing, machine) == "asks for GPU 7, this machine has 4 GPUs (0 to 3)");
    CHECK(never_fits(gpus(2, 8), machine).empty());
  }
}
