#pragma once
// Whole reads and writes on file descriptors and small files, retried on EINTR: one place
// for the loops that dlrun's pipes, /proc files and its own small files need. Thread-safe.

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>

namespace dlrun::launcher {

// False when the reader is gone (EPIPE) or another error stops it.
bool write_all(int fd, std::string_view data);

// A log file that a full disk interrupts (ENOSPC, EDQUOT): what cannot be written is counted
// and dropped, and the first write that goes through again starts with a line that says how
// much was lost there ("[dlrun: 5123 bytes of output lost here: No space left on device]").
// Logs used to stop for the rest of the run at the first full disk, without a word.
struct LogGap {
  uint64_t lost = 0;     // bytes dropped since the last write that went through
  int error = 0;         // why
  bool mid_line = false;  // the file ends inside a line (the marker starts a new one)
  bool said = false;     // the caller has warned of it (once a run)
};
// False only for another error than a full disk: the file is to be given up. Empty `data`
// writes the line about what was lost, if anything was and there is room now (at the log's end).
bool write_log_text(int fd, std::string_view data, LogGap& gap);
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
