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
