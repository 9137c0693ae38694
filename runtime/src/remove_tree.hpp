#pragma once
// Deletes a file or a directory tree, as std::filesystem::remove_all does, through POSIX nftw.
// Why not remove_all: pip's libtorch.so (torch 2.11) exports its own copy of
// std::filesystem::remove_all, the dynamic linker binds every caller in the process to it, and
// on a non-empty directory it calls a null pointer (seen on the GPU machine, docs/runtime.md).

#include <filesystem>
#include <system_error>

namespace dlrun::runtime {

// A missing path is not an error. On failure ec names the first entry that could not go.
void remove_tree(const std::filesystem::path& path, std::error_code& ec) noexcept;

// Throws std::system_error naming the path.
void remove_tree(const std::filesystem::path& path);

}  // namespace dlrun::runtime
