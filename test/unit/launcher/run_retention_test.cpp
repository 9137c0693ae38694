#include "dlrun/launcher/run_retention.hpp"

#include <doctest/doctest.h>

#include "dlrun/error.hpp"

using namespace dlrun::launcher;

TEST_SUITE("launcher::RunRetention") {
  TEST_CASE("defaults without a [retention] table, and the table keys") {
    auto defaults = parse_retention_settings("[scheduler]\nfairness = -1\n", "c.toml");
    CHECK(defaults.days == 14);
    CHECK(defaults.keep == 20);
    auto set = parse_retention_settings("[retention]\ndays = 2.5\nkeep = 0\n", "c.toml");
    CHECK(set.days == 2.5);
    CHECK(set.keep == 0);
    CHECK(parse_retention_settings("[retention]\ndays = 0\n", "c.toml").days == 0);
  }
  TEST_CASE("a bad value names the file, line and key") {
    CHECK_THROWS_WITH_AS(parse_retention_settings("[retention]\ndays = -1\n", "c.toml"),
                         "c.toml:2:8: 'days' must be from 0 (never) to 36500", dlrun::ConfigError);
    CHECK_THROWS_WITH_AS(parse_retention_settings("[retention]\nkeep = 1.5\n", "c.toml"),
                         "c.toml:2:8: 'keep' must be a whole number of jobs, 0 or more",
                         dlrun::ConfigError);
    CHECK_THROWS_WITH_AS(parse_retention_settings("[retention]\nday = 3\n", "c.toml"),
                         "c.toml:2:1: unknown key 'day' in [retention] (known: days, keep)",
                         dlrun::ConfigError);
    CHECK_THROWS_WITH_AS(parse_retention_settings("retention = 3\n", "c.toml"),
                         "c.toml:1:13: 'retention' must be a table: [retention]",
                         dlrun::ConfigError);
  }
}
