#include "dlrun/launcher/text.hpp"

#include <algorithm>
#include <array>
#include <cstdint>
#include <charconv>

#include <fmt/format.h>

#include "dlrun/error.hpp"

namespace dlrun::launcher {

std::vector<std::string> split(std::string_view text, char separator) {
  std::vector<std::string> parts;
  size_t start = 0;
  while (true) {
    size_t end = text.find(separator, start);
    if (end == std::string_view::npos) {
      parts.emplace_back(text.substr(start));
      return parts;
    }
    parts.emplace_back(text.substr(start, end - start));
    start = end + 1;
  }
}

std::string_view trim(std::string_view text) {
  const char* spaces = " \t\r\n";
  size_t first = text.find_first_not_of(spaces);
  if (first == std::string_view::npos) return {};
  size_t last = text.find_last_not_of(spaces);
  return text.substr(first, last - first + 1);
}

std::optional<int> parse_int(std::string_view text) {
  if (text.empty()) return std::nullopt;
  int value = 0;
  auto [end, ec] = std::from_chars(text.data(), text.data() + text.size(), value);
  if (ec != std::errc() || end != text.data() + text.size()) return std::nullopt;
  return value;
}

std::vector<int> parse_int_list(std::string_view text, std::string_view what) {
  std::vector<int> values;
  auto bad = [&](std::string_view detail) {
    return ConfigError(fmt::format("{} {}: {} (expected a list such as 0,3 or 0-3)", what, text, detail));
  };
  if (trim(text).empty()) throw bad("empty list");
  for (const auto& raw : split(text, ',')) {
    auto part = trim(raw);
    auto dash = part.find('-', 1);
    if (dash == std::string_view::npos) {
      auto v = parse_int(part);
      if (!v || *v < 0) throw bad(fmt::format("'{}' is not a non-negative number", part));
      values.push_back(*v);
      continue;
    }
    auto lo = parse_int(part.substr(0, dash));
    auto hi = parse_int(part.substr(dash + 1));
    if (!lo || !hi || *lo < 0 || *hi < *lo) throw bad(fmt::format("'{}' is not a range low-high", part));
    if (*hi - *lo > 1'000'000) throw bad(fmt::format("range '{}' is too large", part));
    for (int v = *lo; v <= *hi; ++v) values.push_back(v);
  }
  std::sort(values.begin(), values.end());
  values.erase(std::unique(values.begin(), values.end()), values.end());
  return values;
}

std::pair<int, int> parse_count_range(std::string_view text, std::string_view what) {
  auto colon = text.find(':');
  auto lo = parse_int(text.substr(0, colon));
  auto hi = colon == std::string_view::npos ? lo : parse_int(text.substr(colon + 1));
  if (!lo || !hi || *lo < 1 || *hi < *lo) {
    throw ConfigError(fmt::format("{} {}: expected a count N (at least 1) or an elastic range MIN:MAX with "
                                  "1 <= MIN <= MAX",
                                  what, text));
  }
  if (*hi > k_max_rank_count) {
    throw ConfigError(fmt::format("{} {}: at most {} ranks", what, text, k_max_rank_count));
  }
  return {*lo, *hi};
}

namespace {

size_t edit_distance(std::string_view a, std::string_view b) {
  std::vector<size_t> row(b.size() + 1);
  for (size_t j = 0; j <= b.size(); ++j) row[j] = j;
  for (size_t i = 1; i <= a.size(); ++i) {
    size_t diagonal = row[0];
    row[0] = i;
    for (size_t j = 1; j <= b.size(); ++j) {
      size_t above = row[j];
      size_t cost = a[i - 1] == b[j - 1] ? 0 : 1;
      row[j] = std::min({row[j] + 1, row[j - 1] + 1, diagonal + cost});
      diagonal = above;
    }
  }
  return row[b.size()];
}

}  // namespace

std::optional<std::string> closest_match(std::string_view word,
                                         const std::vector<std::string>& candidates) {
  std::optional<std::string> best;
  size_t best_distance = std::max<size_t>(2, word.size() / 3) + 1;
  for (const auto& candidate : candidates) {
    size_t d = edit_distance(word, candidate);
    if (d < best_distance) {
      best_distance = d;
      best = candidate;
    }
  }
  return best;
}

// Valid UTF-8 without control characters (a name may hold anything): what is not becomes
// U+FFFD, so neither a terminal nor an XML parser sees it.
std::string clean_text(std::string_view in) {
  static constexpr std::array<uint32_t, 5> k_least = {0, 0, 0x80, 0x800, 0x10000};  // by length
  std::string out;
  for (size_t i = 0; i < in.size();) {
    const auto c = static_cast<unsigned char>(in[i]);
    const size_t n = c < 0x80 ? 1 : (c >> 5) == 6 ? 2 : (c >> 4) == 14 ? 3 : (c >> 3) == 30 ? 4 : 0;
    bool ok = n > 0 && i + n <= in.size();
    uint32_t code = n == 1 ? c : c & (0x7f >> n);
    for (size_t k = 1; ok && k < n; ++k) {
      const auto d = static_cast<unsigned char>(in[i + k]);
      ok = (d & 0xc0) == 0x80;
      code = code << 6 | (d & 0x3f);
    }
    ok = ok && code >= k_least[n] && code <= 0x10ffff && !(code >= 0xd800 && code <= 0xdfff) &&
         code != 0xfffe && code != 0xffff;
    const bool control = code < 0x20 || code == 0x7f || (code >= 0x80 && code < 0xa0);
    if (ok && !control) {
      out.append(in.substr(i, n));
    } else {
      out += "\xEF\xBF\xBD";
    }
    i += ok ? n : 1;
  }
  return out;
}

// Clean text (clean_text), escaped for XML text and attribute values.
std::string xml_text(std::string_view in) {
  std::string out;
  for (char c : clean_text(in)) {
    switch (c) {
      case '&':
        out += "&amp;";
        break;
      case '<':
        out += "&lt;";
        break;
      case '>':
        out += "&gt;";
        break;
      case '"':
        out += "&quot;";
        break;
      case '\'':
        out += "&apos;";
        break;
      default:
        out += c;
    }
  }
  return out;
}

std::string counted(long long n, std::string_view noun) {
  return fmt::format("{} {}{}", n, noun, n == 1 ? "" : "s");
}

std::string listed(const std::vector<std::string>& items) {
  std::string out;
  for (size_t k = 0; k < items.size(); ++k) {
    out += (k == 0 ? "" : k + 1 == items.size() ? " and " : ", ") + items[k];
  }
  return out;
}

}  // namespace dlrun::launcher
