#include "dlrun/launcher/text.hpp"

#include <doctest/doctest.h>

#include "dlrun/error.hpp"

using namespace dlrun::launcher;

TEST_SUITE("launcher::Text") {
  TEST_CASE("parse_int is strict") {
    CHECK(parse_int("42") == 42);
    CHECK_FALSE(parse_int("4x"));
    CHECK_FALSE(parse_int(""));
    CHECK_FALSE(parse_int(" 4"));
    CHECK(parse_int("-3") == -3);
  }
  TEST_CASE("int lists with ranges come back sorted without duplicates") {
    CHECK(parse_int_list("3,0-2,2", "--ranks") == std::vector<int>{0, 1, 2, 3});
    CHECK(parse_int_list("5", "--ranks") == std::vector<int>{5});
  }
  TEST_CASE("bad int lists name the option and the bad part") {
    CHECK_THROWS_WITH_AS(parse_int_list("0,x", "--ranks"),
                         "--ranks 0,x: 'x' is not a non-negative number (expected a list such as "
                         "0,3 or 0-3)",
                         dlrun::ConfigError);
    CHECK_THROWS_AS(parse_int_list("3-1", "--ranks"), dlrun::ConfigError);
    CHECK_THROWS_AS(parse_int_list("", "--ranks"), dlrun::ConfigError);
  }
  TEST_CASE("closest_match suggests near misses only") {
    std::vector<std::string> options{"--nproc", "--gpus", "--grace"};
    CHECK(closest_match("--nprocs", options) == "--nproc");
    CHECK(closest_match("--gpu", options) == "--gpus");
    CHECK_FALSE(closest_match("--verbose", options));
  }
  TEST_CASE("listed reads as a sentence") {
    CHECK(listed({}) == "");
    CHECK(listed({"rank 1"}) == "rank 1");
    CHECK(listed({"rank 1", "rank 2"}) == "rank 1 and rank 2");
    CHECK(listed({"a", "b", "c"}) == "a, b and c");
  }
  TEST_CASE("split and trim") {
    CHECK(split("a,,b", ',') == std::vector<std::string>{"a", "", "b"});
    CHECK(trim("  x \t") == "x");
  }
}
