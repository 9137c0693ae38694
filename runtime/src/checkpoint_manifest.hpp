#pragma once
// The MANIFEST of a checkpoint directory (docs/checkpoint-format.md): the files it holds with
// their sizes and CRC-32s, and a last line that checks the manifest itself. A checkpoint whose
// manifest is missing, cut short or does not match its files is never loaded. Also the file
// system steps that make a checkpoint durable (fsync of files and directories). Internal;
// no LibTorch. Thread-safety: plain functions.

#include <filesystem>
#include <optional>
#include <string>
#include <vector>

namespace dlrun::runtime::manifest {

inline constexpr const char* k_file_name = "MANIFEST";
inline constexpr const char* k_magic = "dlrun-checkpoint 1";

struct Entry {
  std::string name;
  uint64_t size = 0;
  uint32_t crc32 = 0;
};

// CRC-32 (zlib) and size of a file; throws CheckpointError when it cannot be read.
Entry describe_file(const std::filesystem::path& dir, const std::string& name);
// Writes MANIFEST for the named files of dir and fsyncs it.
void write(const std::filesystem::path& dir, const std::vector<std::string>& names);
// The reason dir cannot be trusted, or nullopt when every listed file matches.
std::optional<std::string> verify(const std::filesystem::path& dir);

// fsync of a file or a directory; throws CheckpointError.
void sync_path(const std::filesystem::path& path);

}  // namespace dlrun::runtime::manifest
