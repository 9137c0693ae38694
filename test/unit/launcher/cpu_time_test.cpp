#include "dlrun/launcher/cpu_time.hpp"

#include <doctest/doctest.h>
#include <unistd.h>

#include <chrono>

using dlrun::launcher::cpu_seconds;

TEST_SUITE("launcher::cpu_time") {
  TEST_CASE("a process that works gains CPU time, and one that does not exist has none") {
    const auto before = cpu_seconds(::getpid());
    REQUIRE(before);
    // Work until the clock tick shows it (10 ms at 100 Hz), at most 10 s on a busy machine.
    volatile double sink = 0;
    const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(10);
    while (*cpu_seconds(::getpid()) <= *before && std::chrono::steady_clock::now() < deadline) {
      for (int i = 0; i < 1000000; ++i) sink = sink + i * 0.5;
    }
    CHECK(*cpu_seconds(::getpid()) > *before);
    // This process's group has used at least what this process has.
    const auto group = dlrun::launcher::group_cpu_seconds(::getpgrp());
    REQUIRE(group);
    CHECK(*group >= *cpu_seconds(::getpid()) - 0.05);
    CHECK_FALSE(cpu_seconds(0));
    CHECK_FALSE(cpu_seconds(-1));
    CHECK_FALSE(cpu_seconds(999999999));
    CHECK_FALSE(dlrun::launcher::group_cpu_seconds(999999999));
  }
}
