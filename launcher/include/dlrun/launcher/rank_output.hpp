#pragma once
// Where a rank's output goes: every byte to its log file RUN_DIR/rank-N.log, a segment (up to a
// newline, or a carriage return: a progress bar's redraw) of one stream at a time, so that a
// stderr chunk that arrives in the middle of a stdout line goes in after it, not inside it (a
// segment is held until its end, up to 64 KiB), whole lines with a prefix to dlrun's own
// stdout/stderr (if the rank is shown), and the last lines of
// its stderr kept for the failure report. One RankOutput per rank; the Terminal is shared
// by all ranks of the process and writes each batch of whole lines with one write(2), so
// lines of different ranks never mix. On a terminal ("live" streams) a line that redraws
// itself with '\r' (a progress bar) is shown as it goes: the Terminal keeps one such line at
// the bottom, redrawn in place, and writes other ranks' lines above it (and dlrun's own log
// lines, which may come from any thread). Otherwise not thread-safe: used from the supervisor's
// thread.

#include <atomic>
#include <chrono>
#include <cstddef>
#include <deque>
#include <functional>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <string_view>

#include "dlrun/launcher/fd_io.hpp"
#include "dlrun/launcher/line_splitter.hpp"
#include "dlrun/launcher/output_writer.hpp"

namespace dlrun::launcher {

enum class Stream { out, err };

class Terminal {
 public:
  Terminal(int out_fd = 1, int err_fd = 2) : m_fds{out_fd, err_fd} {}
  ~Terminal();
  Terminal(const Terminal&) = delete;
  Terminal& operator=(const Terminal&) = delete;
  // From now on writes are queued for a thread of their own (output_writer.hpp), dlrun's own
  // log lines behind them, so that a reader who does not read holds up no one but the ranks
  // (see held_back()). Without it (tests), each write(2) happens in write().
  void write_in_background();
  // Whether the ranks' output should wait: more than a few MiB are queued for a reader that
  // does not keep up, and holding back is on (the default; off while the ranks' last output
  // drains, which is bounded).
  bool held_back() const;
  void set_hold_back(bool on) { m_hold_back = on; }
  // Waits at most `timeout` for everything queued to be written; true once it is.
  bool flush(std::chrono::milliseconds timeout);
  // Drops what is queued and writes nothing more to a stream that had output waiting (a reader
  // that will not read, and the user asked dlrun to go); writes happen in write() again, and
  // dlrun's log lines go straight to stderr, or nowhere when stderr was such a stream.
  void abandon();
  // Once everything queued is written: writes happen in write() again, log lines go straight
  // to stderr.
  void stop_background();
  // Whether a stream is a terminal that understands "\r\x1b[K" (the supervisor decides:
  // isatty and TERM is not dumb). Off by default: whole lines only.
  void set_live(Stream stream, bool live) { m_live[index(stream)] = live; }
  bool live(Stream stream) const { return m_live[index(stream)]; }
  // Writes all of `text` (whole lines) above the progress line, if one is shown; after EPIPE
  // on a stream it silently drops that stream's output (the reader is gone; the log files
  // still get everything).
  void write(Stream stream, std::string_view text);
  // Called once, from the thread that writes, when a write to standard output failed because
  // its reader is gone (a pipe whose reader ended: `dlrun local … | head`).
  void on_out_reader_gone(std::function<void()> callback) { m_out_reader_gone = std::move(callback); }
  // Shows `line` (no newline) as the progress line of `owner`, replacing whatever progress
  // line was shown. Nothing on a stream that is not live.
  void show_progress(Stream stream, const void* owner, std::string_view line);
  // Clears the progress line if `owner` shows it (on `stream`, if given).
  void end_progress(const void* owner, std::optional<Stream> stream = std::nullopt);
  // Every rank's whole lines, shown or not, are also appended to `fd` (the job's output.log)
  // with their plain prefix, and so are dlrun's own log lines while they come through here;
  // queued for a thread of its own in background mode (set it before write_in_background), so
  // that a terminal that does not read holds it up no more than the ranks are held back; -1:
  // none. The fd stays the caller's.
  void set_copy(int fd);
  bool copying() const { return m_copy_fd >= 0; }
  void copy(std::string_view text);

 private:
  static int index(Stream stream) { return stream == Stream::out ? 0 : 1; }
  void raw_write(int i, std::string_view text);
  void copy_locked(std::string_view text);  // m_mutex held

  int m_fds[2];
  int m_copy_fd = -1;
  std::unique_ptr<OutputWriter> m_writer;
  std::unique_ptr<OutputWriter> m_copy_writer;  // output.log's, in background mode
  // Held around the progress line and the writes that lift it: dlrun's log lines (the sink set
  // by write_in_background) come from other threads too. Nothing logs while holding it.
  std::mutex m_mutex;
  bool m_hold_back = true;
  bool m_closed[2] = {false, false};
  bool m_live[2] = {false, false};
  std::function<void()> m_out_reader_gone;
  struct Progress {
    int stream = -1;  // -1: none shown
    const void* owner = nullptr;
    std::string line;
  } m_progress;
};

// Whether `line` is a nested dlrun's error, as a `dlrun run` host's agent writes it:
// "dlrun[LABEL]: error: …" (LABEL at most 256 bytes, no ']').
bool is_dlrun_error(std::string_view line);
// The rank such a line says failed ("dlrun[a]: error: rank 5 exited …" -> 5), if it says one.
std::optional<int> rank_in_dlrun_error(std::string_view line);
// Such a line's message up to its first "; " ("rank 5 exited with code 6"), or empty.
std::string dlrun_error_text(std::string_view line);

class RankOutput {
 public:
  struct Options {
    std::string out_prefix;  // rendered, coloured if that stream is a terminal
    std::string err_prefix;
    std::string copy_prefix;  // uncoloured, for the Terminal's copy (output.log)
    bool shown = true;       // false: log file only (see --ranks)
    size_t tail_lines = 20;
    std::string log_name;    // for a warning that the log cannot be written ("rank 0's log")
    bool show_unfinished = false;  // on a live terminal, an unfinished line (a prompt) is shown as it comes
    // With show_unfinished: how many chunks of input rank 0 was given (StdinRelay::given()); a
    // prompt answered since it was shown stays on the screen above the line it ends.
    std::shared_ptr<const std::atomic<uint64_t>> input_given;
    bool join_cut_lines = false;   // no prefix, the only rank shown: a line cut at the limit goes on whole
  };

  // Takes ownership of log_fd (may be -1: no log), opened for appending; readable too, it tells
  // whether an earlier attempt's output there ended mid-line.
  RankOutput(Options options, int log_fd, Terminal& terminal);
  ~RankOutput();
  RankOutput(const RankOutput&) = delete;
  RankOutput& operator=(const RankOutput&) = delete;

  void on_data(Stream stream, std::string_view chunk);
  void on_eof(Stream stream);
  // Whether reading this rank's pipes should wait for the terminal (Terminal::held_back()).
  bool held_back() const { return m_terminal.held_back(); }
  // Appends a note of dlrun's own to the log (e.g. a restart marker).
  void note_in_log(std::string_view line);

  const std::deque<std::string>& stderr_tail() const { return m_tail; }
  // When the rank last wrote anything (nullopt: nothing yet).
  std::optional<std::chrono::steady_clock::time_point> last_output() const { return m_last_output; }
  // The first stderr line of the form "dlrun[LABEL]: error: …" (at most 4096 bytes kept).
  const std::string& first_dlrun_error() const { return m_first_dlrun_error; }

 private:
  void write_log(std::string_view data);
  // Into the log up to the stream's last newline or carriage return; the rest waits.
  void log_stream(Stream stream, std::string_view chunk);
  void write_segment(Stream stream, std::string_view data);
  void flush_log(Stream stream);
  void read_log_end();
  void take_line(Stream stream, std::string_view line);
  void show_pending(Stream stream);
  // Not on a live terminal (a pipe, a CI log, output.log): a line that redraws itself is passed
  // on as a line of its own at most every k_redraw_line_every, so its progress shows before it
  // ends (a bar over a whole epoch showed nothing until the epoch's end).
  void pass_on_redraw(Stream stream, std::string_view pending);
  // Whether input was given to rank 0 since the prompt shown on `stream` (show_unfinished).
  bool prompt_answered(Stream stream) const;
  LineSplitter& splitter(Stream stream) { return m_splitters[stream == Stream::err ? 1 : 0]; }

  Options m_options;
  int m_log_fd;
  Terminal& m_terminal;
  LineSplitter m_splitters[2];
  uint64_t m_prompt_input_mark[2] = {0, 0};  // input_given when each prompt was shown
  std::string m_prompt_shown[2];  // an unfinished line shown as a prompt on out/err (show_unfinished)
  bool m_line_open[2] = {false, false};  // the terminal's line of out/err was left open (join_cut_lines)
  std::optional<std::chrono::steady_clock::time_point> m_last_output;
  std::deque<std::string> m_tail;
  std::string m_first_dlrun_error;
  std::string m_batch;
  std::string m_copy_batch;
  std::string m_log_pending[2];  // per stream: bytes of an unfinished segment, not yet logged
  char m_log_last = '\n';          // the log's last byte ('\n' for an empty log)
  LogGap m_log_gap;                // what a full disk kept out of the log since it last took a write
  int m_log_partial_stream = -1;   // whose bytes end the log mid-line: 0 out, 1 err, 2 an earlier run
  std::chrono::steady_clock::time_point m_redraw_line_at[2];  // per stream: the last redraw passed on as a line
  std::string m_redraw_said[2];  // per stream: that redraw, until its line ends
};

// How often an unfinished line that redraws itself (a progress bar) is passed on as a line
// where the output is no live terminal.
inline constexpr std::chrono::seconds k_redraw_line_every{5};

}  // namespace dlrun::launcher
