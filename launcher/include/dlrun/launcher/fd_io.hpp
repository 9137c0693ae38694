#pragma once
// Whole reads and writes on file descriptors and small files, retried on EINTR: one place
// for the loops that dlrun's pipes, /proc files and its own small files need. Thread-safe.

#include <optional>
#include <string>
#include <string_view>

namespace dlrun::launcher {

// False when the reader is gone (EPIPE) or another error stops it.
bool write_all(int fd, std::string_view data);
// Whether nothing written to `fd` can reach a reader any more: a pipe whose reading end is
// closed, a terminal hung up. False for files, and while it cannot tell.
bool reader_gone(int fd);
// Everything until end-of-file (or an error: what came before it).
std::string read_all(int fd);
// A whole file (also /proc files, whose size stat() does not tell); nullopt when it cannot
// be opened.
std::optional<std::string> read_file(const std::string& path);
// Replaces `path` with `text` whole or not at all: written to a temporary file beside it
// (PATH.tmp.PID, mode 0644 less the umask), then renamed over it; a reader never sees half of
// it, and a failed write (a full disk, a missing directory) leaves the old file as it was.
// SystemError("cannot write PATH: reason") on failure, the temporary file removed.
void write_file_atomically(const std::string& path, std::string_view text);

}  // namespace dlrun::launcher
