#include "dlrun/scaling_rule.hpp"

#include <doctest/doctest.h>

#include <cmath>
#include <stdexcept>
#include <string>

using dlrun::ScalingRule;

TEST_SUITE("runtime::ScalingRule") {
  TEST_CASE("each rule scales the learning rate as documented") {
    const double gain = 3.0, scale = 8.0;
    CHECK(dlrun::lr_factor(ScalingRule::adascale, gain, scale) == doctest::Approx(3.0));
    CHECK(dlrun::lr_factor(ScalingRule::linear, gain, scale) == doctest::Approx(8.0));
    CHECK(dlrun::lr_factor(ScalingRule::sqrt, gain, scale) == doctest::Approx(std::sqrt(8.0)));
    CHECK(dlrun::lr_factor(ScalingRule::adam, gain, scale) == doctest::Approx(std::sqrt(8.0)));
    CHECK(dlrun::lr_factor(ScalingRule::none, gain, scale) == 1.0);
  }

  TEST_CASE("at the initial batch every rule keeps the learning rate") {
    for (auto rule : {ScalingRule::adascale, ScalingRule::linear, ScalingRule::sqrt,
                      ScalingRule::adam, ScalingRule::none}) {
      CHECK(dlrun::lr_factor(rule, 1.0, 1.0) == doctest::Approx(1.0));
    }
  }

  TEST_CASE("an unresolved automatic rule cannot scale the learning rate") {
    CHECK_THROWS_AS(dlrun::lr_factor(ScalingRule::automatic, 2.0, 4.0), std::invalid_argument);
  }

  TEST_CASE("names round-trip and aliases parse") {
    for (auto rule : {ScalingRule::automatic, ScalingRule::adascale, ScalingRule::linear,
                      ScalingRule::sqrt, ScalingRule::adam, ScalingRule::none}) {
      const auto parsed = dlrun::parse_scaling_rule(dlrun::to_string(rule));
      REQUIRE(parsed.has_value());
      CHECK(*parsed == rule);
    }
    CHECK(dlrun::to_string(ScalingRule::adascale) == "adascale");
    CHECK(dlrun::parse_scaling_rule("auto") == ScalingRule::automatic);
    CHECK(dlrun::parse_scaling_rule("automatic") == ScalingRule::automatic);
  }

  TEST_CASE("unknown names are rejected") {
    CHECK_FALSE(dlrun::parse_scaling_rule("").has_value());
    CHECK_FALSE(dlrun::parse_scaling_rule("Linear").has_value());
    CHECK_FALSE(dlrun::parse_scaling_rule("lars").has_value());
  }
}
