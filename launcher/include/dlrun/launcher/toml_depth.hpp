#pragma once
// How deeply a TOML text nests, measured before it is parsed. toml++ builds (and destroys)
// a table per dotted-key part recursively, so a header of 50,000 parts overflows the stack;
// the job-file parser refuses such text first (docs/job-toml.md, "Limits"). The scan is one
// pass without allocation: it skips comments and all four kinds of strings, so dots and
// brackets inside them are not counted. It never under-counts what a TOML parser would
// build from the text; on text that is not TOML it may over-count, which only turns one
// refusal into another. Pure, thread-safe.

#include <cstddef>
#include <optional>
#include <string>
#include <string_view>

namespace dlrun::launcher {

struct TomlDepthLimits {
  int key_parts = 32;  // parts of one dotted key or table header: a.b.c is 3
  int nesting = 32;    // [ and { open at once (table headers count too)
};

struct TomlDepthProblem {
  size_t line = 1;  // 1-based, as toml++ reports positions
  size_t column = 1;
  std::string message;
};

// The first place where `text` goes past `limits`, or nullopt.
std::optional<TomlDepthProblem> find_toml_too_deep(std::string_view text, const TomlDepthLimits& limits = {});

}  // namespace dlrun::launcher
