#include "dlrun/launcher/error_file.hpp"

#include <fmt/format.h>

#include <fstream>
#include <nlohmann/json.hpp>

#include "dlrun/launcher/text.hpp"

namespace dlrun::launcher {
namespace {

// A traceback of 20,000 frames is still well below this; a larger file is not @record's.
constexpr std::streamsize k_max_error_file_bytes = 8 << 20;

std::string string_at(const nlohmann::json& object, const char* key) {
  if (!object.is_object()) return {};
  auto it = object.find(key);
  return it != object.end() && it->is_string() ? it->get<std::string>() : std::string();
}

// What a rank's message may take of dlrun's error line and the job's REASON (a message of
// megabytes went into both, and into every dlrun status after).
constexpr size_t k_max_message_bytes = 4096;

// Printable lines: a rank's bytes reach the terminal through dlrun's own error line, so escape
// sequences and other control characters are shown as U+FFFD (clean_text), newlines kept.
std::string printable_lines(const std::string& text) {
  std::string out;
  size_t begin = 0;
  while (true) {
    const size_t end = text.find('\n', begin);
    out += clean_text(std::string_view(text).substr(begin, end == std::string::npos ? std::string::npos : end - begin));
    if (end == std::string::npos) return out;
    out += '\n';
    begin = end + 1;
  }
}

std::string shortened(std::string text) {
  if (text.size() <= k_max_message_bytes) return text;
  size_t cut = k_max_message_bytes;
  while (cut > 0 && (static_cast<unsigned char>(text[cut]) & 0xc0) == 0x80) --cut;  // a whole character
  const size_t left_out = text.size() - cut;
  text.resize(cut);
  return text + fmt::format(" … ({} more bytes in the rank's error file)", left_out);
}

}  // namespace

std::string error_file_path(const std::string& run_dir, int rank) {
  return fmt::format("{}/rank-{}.error.json", run_dir, rank);
}

std::optional<RankError> parse_error_file(std::string_view text) {
  const auto json = nlohmann::json::parse(text, nullptr, /*allow_exceptions=*/false);
  if (!json.is_object()) return std::nullopt;
  auto message = json.find("message");
  if (message == json.end()) return std::nullopt;
  RankError error;
  if (message->is_string()) {
    error.message = message->get<std::string>();
  } else if (message->is_object()) {
    error.message = string_at(*message, "message");
    if (auto extra = message->find("extraInfo"); extra != message->end()) {
      error.traceback = string_at(*extra, "py_callstack");
    }
  }
  if (error.message.empty() && error.traceback.empty()) return std::nullopt;
  error.message = shortened(printable_lines(error.message));
  error.traceback = printable_lines(error.traceback);  // shown by its last lines (traceback_lines)
  return error;
}

std::optional<RankError> read_error_file(const std::string& path) {
  std::ifstream file(path, std::ios::binary);
  if (!file) return std::nullopt;
  std::string text(static_cast<size_t>(k_max_error_file_bytes) + 1, '\0');
  file.read(text.data(), static_cast<std::streamsize>(text.size()));
  text.resize(static_cast<size_t>(file.gcount()));
  if (text.size() > static_cast<size_t>(k_max_error_file_bytes)) return std::nullopt;
  return parse_error_file(text);
}

std::vector<std::string> traceback_lines(const std::string& traceback, size_t max_lines) {
  std::vector<std::string> lines = split(traceback, '\n');
  while (!lines.empty() && trim(lines.back()).empty()) lines.pop_back();
  if (lines.size() <= max_lines) return lines;
  const size_t left_out = lines.size() - max_lines;
  std::vector<std::string> shown;
  shown.reserve(max_lines + 1);
  shown.push_back(fmt::format("… {} line{} left out …", left_out, left_out == 1 ? "" : "s"));
  shown.insert(shown.end(), lines.end() - static_cast<long>(max_lines), lines.end());
  return shown;
}

}  // namespace dlrun::launcher
