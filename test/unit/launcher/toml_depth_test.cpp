#include "dlrun/launcher/toml_depth.hpp"

#include <doctest/doctest.h>

using namespace dlrun::launcher;

namespace {
std::string repeat(const std::string& piece, int n) {
  std::string out;
  for (int i = 0; i < n; ++i) out += piece;
  return out;
}
std::string dotted(int parts) { return "a" + repeat(".a", parts - 1); }
}  // namespace

TEST_SUITE("launcher::TomlDepth") {
  TEST_CASE("an ordinary job file passes") {
    CHECK_FALSE(find_toml_too_deep("name = \"x.y\"\ncommand = [\"a\", \"b\"]\ngrace = 1.5\n[env]\nA = 1e3\n"
                                   "[scheduler]\nkind = \"slurm\"\nt = 1979-05-27T07:32:00.999-07:00\n"
                                   "[[a.b.c]]\nx.y = {z = [[1, 2], [3.5]]}\n"));
  }
  TEST_CASE("dotted parts are counted in headers and keys, up to the limit") {
    CHECK_FALSE(find_toml_too_deep("[" + dotted(32) + "]\n" + dotted(32) + " = 1\n"));
    CHECK_FALSE(find_toml_too_deep("a . b\t. \"c\" . 'd' = 1\n", {4, 32}));
    auto p = find_toml_too_deep("x = 1\n[" + dotted(33) + "]\n");
    REQUIRE(p);
    CHECK(p->line == 2);
    CHECK(p->column == 65);  // the 32nd dot
    CHECK(p->message == "a key or table header with more than 32 dotted parts");
    CHECK(find_toml_too_deep("[" + dotted(50000) + "]\n"));
    CHECK(find_toml_too_deep("{" + dotted(33) + " = 1}"));
    CHECK(find_toml_too_deep("a . b\t. \"c\" . 'd' = 1\n", {3, 32}));
  }
  TEST_CASE("separate keys and numbers do not add up") {
    CHECK_FALSE(find_toml_too_deep("x = [" + repeat("1.5, ", 100) + "]\n" + repeat("a.b = 1\n", 100)));
    CHECK_FALSE(find_toml_too_deep(repeat("[a.b]\n", 100)));
  }
  TEST_CASE("nesting is counted, up to the limit") {
    CHECK_FALSE(find_toml_too_deep("x = " + repeat("[", 32) + repeat("]", 32)));
    auto p = find_toml_too_deep("x = " + repeat("[", 33) + repeat("]", 33));
    REQUIRE(p);
    CHECK(p->line == 1);
    CHECK(p->column == 37);
    CHECK(p->message == "arrays, tables or table headers nested more than 32 deep");
    CHECK(find_toml_too_deep("x = " + repeat("{a = ", 33)));
    CHECK(find_toml_too_deep(repeat("]", 100) + repeat("[", 33)));  // stray closers do not buy depth
  }
  TEST_CASE("dots and brackets inside strings and comments are not counted") {
    std::string deep = dotted(100) + repeat("[{", 100);
    CHECK_FALSE(find_toml_too_deep("\"" + deep + "\" = '" + deep + "'\n"));
    CHECK_FALSE(find_toml_too_deep("x = \"\"\"" + deep + "\n\\\"\"\"" + deep + "\"\"\"\n"));
    CHECK_FALSE(find_toml_too_deep("x = '''" + deep + "\n''" + deep + "''''' # " + deep + "\n"));
    CHECK_FALSE(find_toml_too_deep("x = \"a\\\"" + deep + "\"\n"));
    CHECK_FALSE(find_toml_too_deep("x = \"\"\n" + dotted(32) + " = 1\n"));  // "" is an empty string
  }
  TEST_CASE("a string that does not end does not hide what follows its line") {
    CHECK(find_toml_too_deep("x = \"open\n[" + dotted(33) + "]\n"));
    CHECK(find_toml_too_deep("x = 'open\n" + repeat("[", 33)));
  }
}
