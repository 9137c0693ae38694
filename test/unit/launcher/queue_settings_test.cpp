#include "dlrun/launcher/queue_settings.hpp"

#include <doctest/doctest.h>

#include "dlrun/error.hpp"

using namespace dlrun::launcher;

TEST_SUITE("launcher::queue_settings") {
  TEST_CASE("[queue] cpu_slots: none without the file or the table, the table's value otherwise") {
    CHECK_FALSE(read_queue_settings("/nonexistent-dlrun-home").cpu_slots);
    CHECK_FALSE(parse_queue_settings("[retention]\ndays = 3\n", "c.toml").cpu_slots);
    CHECK(parse_queue_settings("[queue]\ncpu_slots = 6\n", "c.toml").cpu_slots == 6);
  }
  TEST_CASE("a bad value names the file, the line and the setting") {
    for (const char* bad : {"0", "-2", "1.5", "\"4\"", "70000"}) {
      CAPTURE(bad);
      CHECK_THROWS_WITH_AS(parse_queue_settings(std::string("[queue]\ncpu_slots = ") + bad + "\n", "c.toml"),
                           "c.toml:2:13: 'cpu_slots' must be a whole number of CPU ranks from 1 to 65536",
                           dlrun::ConfigError);
    }
    CHECK_THROWS_WITH_AS(parse_queue_settings("[queue]\ncpu_slot = 2\n", "c.toml"),
                         doctest::Contains("unknown key 'cpu_slot' in [queue] (known: cpu_slots)"), dlrun::ConfigError);
    CHECK_THROWS_WITH_AS(parse_queue_settings("[queu]\ncpu_slots = 2\n", "c.toml"),
                         doctest::Contains("(did you mean [queue]?)"), dlrun::ConfigError);
  }
}
