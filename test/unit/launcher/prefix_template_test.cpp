#include "dlrun/launcher/prefix_template.hpp"

#include <doctest/doctest.h>

#include "dlrun/error.hpp"

using namespace dlrun::launcher;

TEST_SUITE("launcher::PrefixTemplate") {
  RankLabel label{3, 1, 2, 8, "gpu-node"};

  TEST_CASE("the default shows the rank") {
    CHECK(PrefixTemplate(PrefixTemplate::k_default).render(label) == "[3] ");
  }
  TEST_CASE("all placeholders") {
    PrefixTemplate t("{host}:{node_rank}/{local_rank} {rank}/{world_size}| ");
    CHECK(t.render(label) == "gpu-node:2/1 3/8| ");
  }
  TEST_CASE("doubled braces are literal") {
    CHECK(PrefixTemplate("{{{rank}}}").render(label) == "{3}");
  }
  TEST_CASE("an unknown placeholder is refused with a suggestion") {
    CHECK_THROWS_WITH_AS(PrefixTemplate("[{rnak}]"),
                         "--prefix '[{rnak}]': unknown placeholder {rnak}, did you mean {rank}? "
                         "(known: {rank} {local_rank} {node_rank} {host} {world_size})",
                         dlrun::ConfigError);
  }
  TEST_CASE("unbalanced braces are refused") {
    CHECK_THROWS_AS(PrefixTemplate("[{rank]"), dlrun::ConfigError);
    CHECK_THROWS_AS(PrefixTemplate("rank}"), dlrun::ConfigError);
  }
  TEST_CASE("colour wraps the text, not the trailing space") {
    CHECK(colorize_prefix("[0] ", 0) == "\x1b[36m[0]\x1b[0m ");
    CHECK(colorize_prefix("[1] ", 1) == "\x1b[33m[1]\x1b[0m ");
  }
}
