#include "checkpoint_manifest.hpp"

#include <fcntl.h>
#include <fmt/format.h>
#include <unistd.h>
#include <zlib.h>

#include <cerrno>
#include <cstring>
#include "dlrun/runtime_errors.hpp"
#include "dlrun/text_fields.hpp"
#include "text_file.hpp"

namespace dlrun::runtime::manifest {
namespace {

uint32_t crc_of(const std::string& text) {
  return static_cast<uint32_t>(
      ::crc32(0L, reinterpret_cast<const Bytef*>(text.data()), static_cast<uInt>(text.size())));
}

std::string body_of(const std::vector<Entry>& entries) {
  std::string body = std::string(k_magic) + "\n";
  for (const auto& e : entries) body += fmt::format("{:08x} {} {}\n", e.crc32, e.size, e.name);
  return body;
}

}  // namespace

Entry describe_file(const std::filesystem::path& dir, const std::string& name) {
  const auto path = dir / name;
  int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) {
    throw CheckpointError(fmt::format("cannot read {}: {}", path.string(), std::strerror(errno)));
  }
  Entry entry{name, 0, 0};
  uLong crc = ::crc32(0L, Z_NULL, 0);
  std::vector<unsigned char> buffer(1 << 20);
  while (true) {
    ssize_t n = ::read(fd, buffer.data(), buffer.size());
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) {
      int err = errno;
      ::close(fd);
      throw CheckpointError(fmt::format("cannot read {}: {}", path.string(), std::strerror(err)));
    }
    if (n == 0) break;
    crc = ::crc32(crc, buffer.data(), static_cast<uInt>(n));
    entry.size += static_cast<uint64_t>(n);
  }
  ::close(fd);
  entry.crc32 = static_cast<uint32_t>(crc);
  return entry;
}

void sync_path(const std::filesystem::path& path) {
  int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0 || ::fsync(fd) != 0) {
    int err = errno;
    if (fd >= 0) ::close(fd);
    throw CheckpointError(fmt::format("cannot fsync {}: {}", path.string(), std::strerror(err)));
  }
  ::close(fd);
}

void write(const std::filesystem::path& dir, const std::vector<std::string>& names) {
  std::vector<Entry> entries;
  for (const auto& name : names) entries.push_back(describe_file(dir, name));
  std::string body = body_of(entries);
  body += fmt::format("end {:08x}\n", crc_of(body));
  const auto path = dir / k_file_name;
  write_text(path, body);
  sync_path(path);
}

std::optional<std::string> verify(const std::filesystem::path& dir) {
  std::string text;
  if (!read_text(dir / k_file_name, text)) return std::string("it has no MANIFEST (an interrupted save?)");
  const size_t end_line = text.rfind("end ");
  if (end_line == std::string::npos || text.empty() || text.back() != '\n') {
    return std::string("its MANIFEST is cut short");
  }
  const std::string body = text.substr(0, end_line);
  if (fmt::format("end {:08x}\n", crc_of(body)) != text.substr(end_line)) {
    return std::string("its MANIFEST does not match its own checksum");
  }
  const auto lines = text::lines(body);
  const std::string_view first = lines.empty() ? std::string_view() : lines[0];
  if (first != k_magic) return fmt::format("its MANIFEST starts with '{}', not '{}'", first, k_magic);
  for (size_t i = 1; i < lines.size(); ++i) {
    const std::string_view line = lines[i];
    const auto fields = text::fields(line);
    uint64_t size = 0;
    if (fields.size() < 3 || !text::parse(fields[1], size)) {
      return fmt::format("bad MANIFEST line '{}'", line);
    }
    const std::string crc_text(fields[0]), name(fields[2]);
    Entry actual;
    try {
      actual = describe_file(dir, name);
    } catch (const CheckpointError&) {
      return fmt::format("{} is missing", name);
    }
    if (actual.size != size) {
      return fmt::format("{} has {} bytes, the MANIFEST says {}", name, actual.size, size);
    }
    if (fmt::format("{:08x}", actual.crc32) != crc_text) {
      return fmt::format("{} does not match its CRC-32 in the MANIFEST", name);
    }
  }
  return std::nullopt;
}

}  // namespace dlrun::runtime::manifest
