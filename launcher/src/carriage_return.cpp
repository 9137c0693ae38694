#include "dlrun/launcher/carriage_return.hpp"

namespace dlrun::launcher {

bool has_visible_text(std::string_view text) {
  for (size_t i = 0; i < text.size(); ++i) {
    const char c = text[i];
    if (c == '\x1b') {
      // CSI: ESC '[' parameters… final byte in '@'..'~'; any other escape: skip ESC and one byte.
      if (i + 1 < text.size() && text[i + 1] == '[') {
        i += 2;
        while (i < text.size() && !(text[i] >= '@' && text[i] <= '~')) ++i;
      } else {
        ++i;
      }
      continue;
    }
    if (c != ' ' && c != '\t' && c != '\r') return true;
  }
  return false;
}

namespace {

// The start of the last non-empty '\r'-separated part of text (what a terminal shows last: an
// empty part moves nothing), or npos.
size_t last_part(std::string_view text) {
  size_t end = text.size();
  while (true) {
    const size_t cr = end == 0 ? std::string_view::npos : text.rfind('\r', end - 1);
    const size_t begin = cr == std::string_view::npos ? 0 : cr + 1;
    if (end > begin) return begin;
    if (cr == std::string_view::npos) return std::string_view::npos;
    end = cr;
  }
}

}  // namespace

std::string_view shown_segment(std::string_view line) {
  if (line.find('\r') == std::string_view::npos) return line;
  const size_t begin = last_part(line);
  if (begin == std::string_view::npos) return {};
  const size_t end = line.find('\r', begin);
  const std::string_view part =
      line.substr(begin, end == std::string_view::npos ? std::string_view::npos : end - begin);
  // Blanks or "\x1b[K" written over a bar clear it; a line written after the clearing is
  // shown without it.
  if (!has_visible_text(part)) return {};
  return part.substr(0, 3) == "\x1b[K" ? part.substr(3) : part;
}

void drop_replaced_redraws(std::string& pending) {
  const size_t last_cr = pending.rfind('\r');
  if (last_cr == std::string::npos || last_cr == 0) return;
  // Keep the last non-empty part (from the '\r' before it) and what follows it.
  const size_t begin = last_part(pending);
  const size_t keep = begin == std::string::npos ? last_cr : (begin == 0 ? 0 : begin - 1);
  pending.erase(0, keep);
}

}  // namespace dlrun::launcher
