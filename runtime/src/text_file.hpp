#pragma once
// Whole small files (checkpoint state, MANIFEST) read and written with stdio, not iostreams:
// in a Python process with a pip torch, the runtime's iostream code crashed (a second copy
// of libstdc++'s templates in the process: docs/runtime.md, "GPUs").

#include <filesystem>
#include <string>

namespace dlrun::runtime {

// Writes `text` to `path` (created or truncated); CheckpointError with the reason on failure.
void write_text(const std::filesystem::path& path, const std::string& text);

// The whole file; false when it cannot be opened or read.
bool read_text(const std::filesystem::path& path, std::string& text);

}  // namespace dlrun::runtime
