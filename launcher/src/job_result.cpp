#include "dlrun/launcher/job_result.hpp"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <nlohmann/json.hpp>

namespace dlrun::launcher {
namespace {

constexpr int k_max_result_depth = 32;  // as job files are capped: deeper broke jq for every job

// Deeper than k_max_result_depth in arrays and objects (outside strings).
bool too_deep(const std::string& text) {
  int depth = 0;
  bool in_string = false, escaped = false;
  for (const char c : text) {
    if (in_string) {
      if (escaped) escaped = false;
      else if (c == '\\') escaped = true;
      else if (c == '"') in_string = false;
    } else if (c == '"') {
      in_string = true;
    } else if (c == '[' || c == '{') {
      if (++depth > k_max_result_depth) return true;
    } else if (c == ']' || c == '}') {
      --depth;
    }
  }
  return false;
}

// The file's bytes when it is a regular file of at most `limit` bytes: a FIFO there blocked
// dlrun status, and the job's supervisor at its end, for good.
std::optional<std::string> read_regular_file(const std::string& path, size_t limit) {
  const int fd = ::open(path.c_str(), O_RDONLY | O_NONBLOCK | O_NOFOLLOW | O_CLOEXEC);
  if (fd < 0) return std::nullopt;
  struct stat st {};
  std::optional<std::string> out;
  if (::fstat(fd, &st) == 0 && S_ISREG(st.st_mode) && static_cast<size_t>(st.st_size) <= limit) {
    std::string text(static_cast<size_t>(st.st_size), '\0');
    size_t done = 0;
    while (done < text.size()) {
      const ssize_t n = ::read(fd, text.data() + done, text.size() - done);
      if (n <= 0) break;
      done += static_cast<size_t>(n);
    }
    text.resize(done);
    out = std::move(text);
  }
  ::close(fd);
  return out;
}

}  // namespace

std::optional<std::string> read_job_result(const std::string& run_dir) {
  if (run_dir.empty()) return std::nullopt;
  const auto text = read_regular_file(run_dir + "/" + k_result_file_name, k_max_result_bytes);
  if (!text || too_deep(*text)) return std::nullopt;
  const auto json = nlohmann::ordered_json::parse(*text, nullptr, false);  // in the program's order
  if (json.is_discarded() || !json.is_object()) return std::nullopt;
  return json.dump(-1, ' ', false, nlohmann::ordered_json::error_handler_t::replace);
}

}  // namespace dlrun::launcher
