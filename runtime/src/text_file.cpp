#include "text_file.hpp"

#include <fmt/format.h>

#include <cerrno>
#include <cstdio>
#include <cstring>

#include "dlrun/runtime_errors.hpp"

namespace dlrun::runtime {

void write_text(const std::filesystem::path& path, const std::string& text) {
  std::FILE* f = std::fopen(path.c_str(), "wb");
  bool ok = f && std::fwrite(text.data(), 1, text.size(), f) == text.size();
  const int err = errno;
  if (f) ok = std::fclose(f) == 0 && ok;
  if (!ok) {
    throw CheckpointError(
        fmt::format("cannot write {}: {}", path.string(), std::strerror(err ? err : errno)));
  }
}

bool read_text(const std::filesystem::path& path, std::string& text) {
  std::FILE* f = std::fopen(path.c_str(), "rb");
  if (!f) return false;
  text.clear();
  char buffer[65536];
  size_t n;
  while ((n = std::fread(buffer, 1, sizeof buffer, f)) > 0) text.append(buffer, n);
  const bool ok = !std::ferror(f);
  std::fclose(f);
  return ok;
}

}  // namespace dlrun::runtime
