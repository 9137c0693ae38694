#pragma once
// OutputWriter: writes text to file descriptors (dlrun's own stdout and stderr) from a thread
// of its own, in the order it was given, so that the supervisor's event loop never waits on a
// reader that does not read — a pipe into `less` with a full screen, a terminal stopped with
// Ctrl-S. Signals, rank exits and the ranks' log files go on meanwhile. What waits is counted
// (pending_bytes()): the supervisor stops reading the ranks' pipes while too much waits, so a
// stuck reader holds the ranks back as a direct write would, without holding dlrun. Writes of
// one descriptor that wait together go out in one write(2). Thread-safe.

#include <chrono>
#include <cstddef>
#include <memory>
#include <set>
#include <string>
#include <utility>
#include <vector>
#include <string_view>

namespace dlrun::launcher {

class OutputWriter {
 public:
  OutputWriter();
  // Waits until everything queued is written, unless abandon() was called.
  ~OutputWriter();
  OutputWriter(const OutputWriter&) = delete;
  OutputWriter& operator=(const OutputWriter&) = delete;

  // Queues `text` for `fd`; false (and nothing queued) once a write to `fd` failed: its
  // reader is gone (EPIPE) or another error stops it.
  bool write(int fd, std::string_view text);
  // Bytes queued or being written.
  size_t pending_bytes() const;
  // Waits until everything queued is written (or its descriptor failed), at most `timeout`;
  // true if so.
  bool flush(std::chrono::milliseconds timeout);
  // Stops waiting for a reader that may never read. The descriptor being written (or, if none
  // is, the next one) and any that is the same file are stuck: their output is dropped, and
  // the write in progress is left to the thread, which the process's exit ends. What was queued
  // for other descriptors is handed back, in order, for the caller to write. Writes after it
  // fail; the destructor no longer waits.
  struct Abandoned {
    std::set<int> stuck;
    std::vector<std::pair<int, std::string>> rest;
  };
  Abandoned abandon();

 private:
  struct State;
  std::shared_ptr<State> m_state;
};

}  // namespace dlrun::launcher
