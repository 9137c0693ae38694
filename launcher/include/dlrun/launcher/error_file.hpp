#pragma once
// The error file of a rank: the JSON file where torch.distributed.elastic's @record decorator
// (torch.distributed.elastic.multiprocessing.errors.record, on the entry point of torchrun
// scripts) writes the exception that ends the rank, at the path in TORCHELASTIC_ERROR_FILE.
// dlrun gives every rank one in its run directory and, when the rank fails, reports the
// exception from it (supervisor.cpp). Format: docs/channels.md. parse_error_file() is pure;
// read_error_file() reads one file. Thread-safe.

#include <cstddef>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace dlrun::launcher {

struct RankError {
  std::string message;    // "ValueError: bad batch size"
  std::string traceback;  // Python's "Traceback (most recent call last): …", or empty
};

// RUN_DIR/rank-N.error.json: the rank's TORCHELASTIC_ERROR_FILE.
std::string error_file_path(const std::string& run_dir, int rank);

// What @record wrote: {"message": {"message": M, "extraInfo": {"py_callstack": T, …}, …}}
// (or {"message": M}, torch's other form). nullopt for anything else.
std::optional<RankError> parse_error_file(std::string_view text);

// The error file at `path`; nullopt when there is none or it is not in that format.
std::optional<RankError> read_error_file(const std::string& path);

// The lines of a traceback to show: all of them up to `max_lines`, else its last
// `max_lines` after a line that says how many were left out (the exception is at the end).
std::vector<std::string> traceback_lines(const std::string& traceback, size_t max_lines);

}  // namespace dlrun::launcher
