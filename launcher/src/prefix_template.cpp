#include "dlrun/launcher/prefix_template.hpp"

#include <algorithm>

#include <fmt/format.h>

#include "dlrun/error.hpp"
#include "dlrun/launcher/text.hpp"

namespace dlrun::launcher {

PrefixTemplate::PrefixTemplate(std::string_view text) {
  static const std::vector<std::pair<std::string, Field>> k_fields = {
      {"rank", Field::rank},       {"local_rank", Field::local_rank},
      {"node_rank", Field::node_rank}, {"host", Field::host},
      {"world_size", Field::world_size}};
  std::string literal;
  auto flush_literal = [&] {
    if (!literal.empty()) m_pieces.push_back(Piece{Field::literal, std::move(literal)});
    literal.clear();
  };
  for (size_t i = 0; i < text.size(); ++i) {
    char c = text[i];
    if ((c == '{' || c == '}') && i + 1 < text.size() && text[i + 1] == c) {
      literal += c;
      ++i;
      continue;
    }
    if (c == '}') {
      throw ConfigError(fmt::format("--prefix '{}': unmatched '}}' (write '}}}}' for a literal brace)", text));
    }
    if (c != '{') {
      literal += c;
      continue;
    }
    size_t close = text.find('}', i);
    if (close == std::string_view::npos) {
      throw ConfigError(fmt::format("--prefix '{}': unclosed '{{'", text));
    }
    std::string name(text.substr(i + 1, close - i - 1));
    auto it = std::find_if(k_fields.begin(), k_fields.end(),
                           [&](const auto& f) { return f.first == name; });
    if (it == k_fields.end()) {
      std::vector<std::string> names;
      for (const auto& f : k_fields) names.push_back(f.first);
      auto hint = closest_match(name, names);
      throw ConfigError(fmt::format(
          "--prefix '{}': unknown placeholder {{{}}}{} (known: {{rank}} {{local_rank}} "
          "{{node_rank}} {{host}} {{world_size}})",
          text, name, hint ? fmt::format(", did you mean {{{}}}?", *hint) : ""));
    }
    flush_literal();
    m_pieces.push_back(Piece{it->second, std::string()});
    i = close;
  }
  flush_literal();
}

std::string PrefixTemplate::render(const RankLabel& label) const {
  std::string out;
  for (const auto& piece : m_pieces) {
    switch (piece.field) {
      case Field::literal: out += piece.text; break;
      case Field::rank: out += std::to_string(label.rank); break;
      case Field::local_rank: out += std::to_string(label.local_rank); break;
      case Field::node_rank: out += std::to_string(label.node_rank); break;
      case Field::host: out += label.host; break;
      case Field::world_size: out += std::to_string(label.world_size); break;
    }
  }
  return out;
}

std::string colorize_prefix(std::string_view prefix, int rank) {
  static const int k_colors[] = {36, 33, 35, 32, 34, 31};  // cyan yellow magenta green blue red
  int color = k_colors[rank % 6];
  // Keep trailing spaces outside the colour so the text lines up.
  size_t end = prefix.find_last_not_of(' ');
  std::string_view body = end == std::string_view::npos ? prefix : prefix.substr(0, end + 1);
  std::string_view tail = end == std::string_view::npos ? std::string_view{} : prefix.substr(end + 1);
  return fmt::format("\x1b[{}m{}\x1b[0m{}", color, body, tail);
}

}  // namespace dlrun::launcher
