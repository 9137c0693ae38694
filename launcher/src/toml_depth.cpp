#include "dlrun/launcher/toml_depth.hpp"

#include <algorithm>

#include <fmt/format.h>

namespace dlrun::launcher {
namespace {

bool bare_key_char(char c) {
  return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '_' || c == '-';
}

bool three(std::string_view text, size_t at, char quote) {
  return at + 3 <= text.size() && text[at] == quote && text[at + 1] == quote && text[at + 2] == quote;
}

// The offset just past the string that opens at `at` (a " or '), or where it stops being
// one (a single-line string at its newline, any string at the end of the text).
size_t skip_string(std::string_view text, size_t at) {
  const char quote = text[at];
  const bool escapes = quote == '"';
  const bool multi_line = three(text, at, quote);
  size_t i = at + (multi_line ? 3 : 1);
  while (i < text.size()) {
    char c = text[i];
    if (escapes && c == '\\') {
      i += 2;
    } else if (!multi_line && c == '\n') {
      return i;
    } else if (c != quote) {
      ++i;
    } else if (!multi_line) {
      return i + 1;
    } else if (three(text, i, quote)) {
      // """a"""" is a" : up to two more quotes belong to the content.
      size_t end = i + 3;
      for (int extra = 0; extra < 2 && end < text.size() && text[end] == quote; ++extra) ++end;
      return end;
    } else {
      ++i;
    }
  }
  return text.size();
}

TomlDepthProblem problem_at(std::string_view text, size_t offset, std::string message) {
  TomlDepthProblem p;
  p.message = std::move(message);
  size_t line_start = 0;
  for (size_t i = 0; i < offset; ++i) {
    if (text[i] == '\n') {
      ++p.line;
      line_start = i + 1;
    }
  }
  p.column = offset - line_start + 1;
  return p;
}

}  // namespace

std::optional<TomlDepthProblem> find_toml_too_deep(std::string_view text, const TomlDepthLimits& limits) {
  int parts = 0;  // of the dotted run being read: tokens joined by dots (and blanks)
  int depth = 0;
  size_t i = 0;
  while (i < text.size()) {
    char c = text[i];
    if (c == '"' || c == '\'') {
      parts = std::max(parts, 1);
      i = skip_string(text, i);
      continue;
    }
    if (c == '#') {
      i = std::min(text.size(), text.find('\n', i));
      continue;
    }
    if (c == '.') {
      parts = std::max(parts, 1);
      if (++parts > limits.key_parts) {
        return problem_at(text, i, fmt::format("a key or table header with more than {} dotted parts", limits.key_parts));
      }
    } else if (c == '[' || c == '{') {
      if (++depth > limits.nesting) {
        return problem_at(text, i, fmt::format("arrays, tables or table headers nested more than {} deep", limits.nesting));
      }
      parts = 0;
    } else if (c == ']' || c == '}') {
      depth = std::max(0, depth - 1);
      parts = 0;
    } else if (bare_key_char(c)) {
      parts = std::max(parts, 1);
    } else if (c != ' ' && c != '\t') {
      parts = 0;  // = , newline or anything else ends a key (or a number: 1.5 has two "parts")
    }
    ++i;
  }
  return std::nullopt;
}

}  // namespace dlrun::launcher
