#include "dlrun/launcher/scheduler_settings.hpp"

#include <doctest/doctest.h>

#include "dlrun/error.hpp"
#include "dlrun/launcher/run_retention.hpp"

using namespace dlrun::launcher;

TEST_SUITE("launcher::scheduler_settings") {
  TEST_CASE("no file or no table: the defaults, the table's values otherwise") {
    auto defaults = read_scheduler_settings("/nonexistent-dlrun-home");
    CHECK(defaults.policy.fairness == -1);
    CHECK(defaults.policy.restart_seconds == 10);
    CHECK(defaults.interval_seconds == 60);
    CHECK(parse_scheduler_settings("[retention]\ndays = 3\n", "c.toml").policy.starvation_seconds == 600);
    auto s = parse_scheduler_settings(
        "[scheduler]\nfairness = 0.5\nrestart_seconds = 5\nstarvation_seconds = 120\ninterval_seconds = 10\n", "c.toml");
    CHECK(s.policy.fairness == 0.5);
    CHECK(s.policy.restart_seconds == 5);
    CHECK(s.policy.starvation_seconds == 120);
    CHECK(s.interval_seconds == 10);
  }
  TEST_CASE("a bad setting names the file, the line and the setting") {
    CHECK_THROWS_WITH_AS(parse_scheduler_settings("[scheduler]\nfairness = 2\n", "c.toml"),
                         "c.toml:2:12: 'fairness' = 2: must be from -10 to 1", dlrun::ConfigError);
    CHECK_THROWS_WITH_AS(parse_scheduler_settings("[scheduler]\nrestart_seconds = nan\n", "c.toml"),
                         doctest::Contains("c.toml:2:19: 'restart_seconds' = nan"), dlrun::ConfigError);
    CHECK_THROWS_WITH_AS(parse_scheduler_settings("[scheduler]\nfairnes = 1\n", "c.toml"),
                         doctest::Contains("unknown key 'fairnes' in [scheduler]"), dlrun::ConfigError);
    CHECK_THROWS_AS(parse_scheduler_settings("scheduler = 3\n", "c.toml"), dlrun::ConfigError);
    // Below 1, NaN and past a week alike: one message with the range.
    CHECK_THROWS_WITH_AS(parse_scheduler_settings("[scheduler]\ninterval_seconds = 0\n", "c.toml"),
                         "c.toml:2:20: 'interval_seconds' = 0: must be a number of seconds from 1 to 604800",
                         dlrun::ConfigError);
    CHECK_THROWS_WITH_AS(parse_scheduler_settings("[scheduler]\ninterval_seconds = nan\n", "c.toml"),
                         "c.toml:2:20: 'interval_seconds' = nan: must be a number of seconds from 1 to 604800",
                         dlrun::ConfigError);
    CHECK_THROWS_WITH_AS(parse_scheduler_settings("[scheduler]\ninterval_seconds = 1e9\n", "c.toml"),
                         doctest::Contains("'interval_seconds' = 1000000000: must be a number of seconds from 1 to 604800"),
                         dlrun::ConfigError);
    CHECK_THROWS_AS(parse_scheduler_settings("[scheduler\n", "c.toml"), dlrun::ConfigError);
  }
  TEST_CASE("a table no part reads (a typo) is refused, not ignored, by every part") {
    const std::string typo = "[schedular]\nfairness = 0.5\n";
    CHECK_THROWS_WITH_AS(parse_scheduler_settings(typo, "c.toml"),
                         "c.toml:1:2: unknown table 'schedular' (did you mean [scheduler]?): the file has "
                         "[scheduler] (docs/scheduling.md), [retention] and [queue] (docs/jobs.md)",
                         dlrun::ConfigError);
    CHECK_THROWS_WITH_AS(dlrun::launcher::parse_retention_settings(typo, "c.toml"),
                         doctest::Contains("unknown table 'schedular'"), dlrun::ConfigError);
    CHECK_THROWS_WITH_AS(parse_scheduler_settings("days = 3\n", "c.toml"),
                         doctest::Contains("unknown key 'days': the file has"), dlrun::ConfigError);
  }
}
