#pragma once
// Where a rank's output goes: every byte to its log file RUN_DIR/rank-N.log, whole lines
// with a prefix to dlrun's own stdout/stderr (if the rank is shown), and the last lines of
// its stderr kept for the failure report. One RankOutput per rank; the Terminal is shared
// by all ranks of the process and writes each batch of whole lines with one write(2), so
// lines of different ranks never mix. Not thread-safe: used from the supervisor's thread.

#include <cstddef>
#include <deque>
#include <string>
#include <string_view>

#include "dlrun/launcher/line_splitter.hpp"

namespace dlrun::launcher {

enum class Stream { out, err };

class Terminal {
 public:
  Terminal(int out_fd = 1, int err_fd = 2) : m_fds{out_fd, err_fd} {}
  // Writes all of `text`; after EPIPE on a stream it silently drops that stream's output
  // (the reader is gone; the log files still get everything).
  void write(Stream stream, std::string_view text);

 private:
  int m_fds[2];
  bool m_closed[2] = {false, false};
};

class RankOutput {
 public:
  struct Options {
    std::string out_prefix;  // rendered, coloured if that stream is a terminal
    std::string err_prefix;
    bool shown = true;       // false: log file only (see --ranks)
    size_t tail_lines = 20;
  };

  // Takes ownership of log_fd (may be -1: no log).
  RankOutput(Options options, int log_fd, Terminal& terminal);
  ~RankOutput();
  RankOutput(const RankOutput&) = delete;
  RankOutput& operator=(const RankOutput&) = delete;

  void on_data(Stream stream, std::string_view chunk);
  void on_eof(Stream stream);
  // Appends a note of dlrun's own to the log (e.g. a restart marker).
  void note_in_log(std::string_view line);

  const std::deque<std::string>& stderr_tail() const { return m_tail; }

 private:
  void write_log(std::string_view data);
  void take_line(Stream stream, std::string_view line);
  LineSplitter& splitter(Stream stream) { return m_splitters[stream == Stream::err ? 1 : 0]; }

  Options m_options;
  int m_log_fd;
  Terminal& m_terminal;
  LineSplitter m_splitters[2];
  std::deque<std::string> m_tail;
  std::string m_batch;
};

}  // namespace dlrun::launcher
