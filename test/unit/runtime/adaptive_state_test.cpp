#include "adaptive_state.hpp"

#include <doctest/doctest.h>

#include <stdexcept>

using dlrun::runtime::AdaptiveState;

TEST_SUITE("runtime::AdaptiveState") {
  TEST_CASE("the text round-trips, sections included") {
    AdaptiveState s;
    s.global_batch = 384;
    s.world_size = 3;
    s.step = 1234;
    s.progress = 2345.6789012345;
    s.base_lr = {0.002, 0.0001, 1e-310};  // a subnormal too (std::stod refused it)
    s.noise = "a 1\nb 2\n";
    s.profile = "p 1 2 3\n";
    const AdaptiveState back =
        dlrun::runtime::parse_adaptive_state(dlrun::runtime::format_adaptive_state(s));
    CHECK(back.global_batch == 384);
    CHECK(back.world_size == 3);
    CHECK(back.step == 1234);
    CHECK(back.progress == s.progress);
    CHECK(back.base_lr == s.base_lr);
    CHECK(back.noise == s.noise);
    CHECK(back.profile == s.profile);
    CHECK(back.batch_cap == 0);
    // The cap after a loss ran away: written only when there is one.
    CHECK(dlrun::runtime::format_adaptive_state(s).find("batch_cap") == std::string::npos);
    s.batch_cap = 256;
    CHECK(dlrun::runtime::parse_adaptive_state(dlrun::runtime::format_adaptive_state(s)).batch_cap == 256);
    // The loss's trend: written only once measured, read back whole or not at all.
    CHECK(dlrun::runtime::format_adaptive_state(s).find("fall_rate") == std::string::npos);
    CHECK(back.fall_rate < 0);
    s.fall_rate = 0.0125;
    s.fall_goodput = 812.5;
    const AdaptiveState trend = dlrun::runtime::parse_adaptive_state(dlrun::runtime::format_adaptive_state(s));
    CHECK(trend.fall_rate == 0.0125);
    CHECK(trend.fall_goodput == 812.5);
    CHECK(dlrun::runtime::parse_adaptive_state("dlrun-adaptive 1\nglobal_batch 8\nfall_rate 0.5\n").fall_rate < 0);
  }

  TEST_CASE("malformed text is refused with what is wrong") {
    CHECK_THROWS_WITH_AS(dlrun::runtime::parse_adaptive_state("hello\n"),
                         "not an AdaptiveBatch state (first line: 'hello')", std::invalid_argument);
    CHECK_THROWS_WITH_AS(dlrun::runtime::parse_adaptive_state("dlrun-adaptive 1\nstep 3\n"),
                         "no positive global_batch", std::invalid_argument);
    CHECK_THROWS_WITH_AS(
        dlrun::runtime::parse_adaptive_state("dlrun-adaptive 1\nglobal_batch 8\nbatch 9\n"),
        "unknown key 'batch'", std::invalid_argument);
  }
}
