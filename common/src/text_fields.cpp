#include "dlrun/text_fields.hpp"

#include <charconv>
#include <system_error>

namespace dlrun::text {
namespace {

template <typename T>
bool parse_whole(std::string_view field, T& value) {
  if (field.empty()) return false;
  // from_chars takes no leading '+', which printf-style writers never emit anyway.
  const char* end = field.data() + field.size();
  T out{};
  const auto [ptr, ec] = std::from_chars(field.data(), end, out);
  if (ec != std::errc() || ptr != end) return false;
  value = out;
  return true;
}

bool is_space(char c) {
  return c == ' ' || c == '\t' || c == '\r' || c == '\n' || c == '\f' || c == '\v';
}

}  // namespace

std::string number(double value) {
  char buffer[64];
  const auto [ptr, ec] = std::to_chars(buffer, buffer + sizeof buffer, value);
  return ec == std::errc() ? std::string(buffer, ptr) : std::string("nan");
}

std::vector<std::string_view> fields(std::string_view line) {
  std::vector<std::string_view> out;
  size_t i = 0;
  while (i < line.size()) {
    while (i < line.size() && is_space(line[i])) ++i;
    const size_t begin = i;
    while (i < line.size() && !is_space(line[i])) ++i;
    if (i > begin) out.push_back(line.substr(begin, i - begin));
  }
  return out;
}

std::vector<std::string_view> lines(std::string_view text) {
  std::vector<std::string_view> out;
  size_t begin = 0;
  while (begin < text.size()) {
    size_t end = text.find('\n', begin);
    if (end == std::string_view::npos) end = text.size();
    out.push_back(text.substr(begin, end - begin));
    begin = end + 1;
  }
  return out;
}

bool parse(std::string_view field, double& value) { return parse_whole(field, value); }
bool parse(std::string_view field, int64_t& value) { return parse_whole(field, value); }
bool parse(std::string_view field, uint64_t& value) { return parse_whole(field, value); }
bool parse(std::string_view field, int& value) { return parse_whole(field, value); }

}  // namespace dlrun::text
