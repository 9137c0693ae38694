#include "dlrun/launcher/rank_output.hpp"

#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>

#include "dlrun/launcher/carriage_return.hpp"
#include "dlrun/launcher/fd_io.hpp"
#include "dlrun/log.hpp"

namespace dlrun::launcher {
namespace {

constexpr std::string_view k_clear_line = "\r\x1b[K";
constexpr size_t k_most_queued = 4 << 20;  // bytes for the terminal before the ranks are held back

}  // namespace

Terminal::~Terminal() {
  if (!m_writer) return;
  // Only when the supervisor could not end its job in order (an exception): the reader gets a
  // while, as after a stop signal, not forever (a stop signal could not end that wait).
  if (flush(std::chrono::seconds(2))) {
    stop_background();
  } else {
    abandon();
  }
}

void Terminal::write_in_background() {
  if (m_writer) return;
  m_writer = std::make_unique<OutputWriter>();
  // The copy (output.log) has a thread of its own: a terminal that does not read (Ctrl-S, a
  // pipe into a pager) does not hold up `dlrun logs` of this run.
  if (m_copy_fd >= 0) m_copy_writer = std::make_unique<OutputWriter>();
  // dlrun's own lines come from any thread (the log's lock held): on a live stderr they lift a
  // rank's progress line as the ranks' lines do, instead of being glued to its end.
  log::set_sink([this](std::string_view line) {
    std::lock_guard lock(m_mutex);
    const bool lift = m_progress.stream >= 0 && m_live[1];
    if (lift) m_writer->write(m_fds[m_progress.stream], k_clear_line);
    m_writer->write(m_fds[1], line);
    if (lift) m_writer->write(m_fds[m_progress.stream], m_progress.line);
    copy_locked(line);
  });
}

bool Terminal::held_back() const {
  if (!m_hold_back || !m_writer) return false;
  return m_writer->pending_bytes() + (m_copy_writer ? m_copy_writer->pending_bytes() : 0) > k_most_queued;
}

bool Terminal::flush(std::chrono::milliseconds timeout) {
  const auto deadline = std::chrono::steady_clock::now() + timeout;
  const bool copied = !m_copy_writer || m_copy_writer->flush(timeout);
  const auto left = std::max(std::chrono::milliseconds(0), std::chrono::duration_cast<std::chrono::milliseconds>(
                                                               deadline - std::chrono::steady_clock::now()));
  return (!m_writer || m_writer->flush(left)) && copied;
}

void Terminal::abandon() {
  if (!m_writer) return;
  const OutputWriter::Abandoned abandoned = m_writer->abandon();
  for (int i = 0; i < 2; ++i) m_closed[i] = m_closed[i] || abandoned.stuck.count(m_fds[i]) > 0;
  // dlrun's own lines: straight to stderr again (and to the copy, log.hpp), unless stderr is
  // the reader that does not read; then to the copy only (a write would wait for it), for the
  // rest of the process. Decided before the sink goes: a line from another thread meanwhile
  // goes to the abandoned writer, which drops it, never to the stuck stderr.
  if (abandoned.stuck.count(STDERR_FILENO)) log::set_stderr(false);
  log::set_sink({});
  m_writer.reset();
  // The copy is a file: what is queued for it goes out, then it is written directly.
  m_copy_writer.reset();
  // What waited behind the stuck reader for a reader that reads (dlrun's messages on stderr).
  for (const auto& [fd, text] : abandoned.rest) write_all(fd, text);
}

void Terminal::stop_background() {
  if (!m_writer) return;  // also after abandon(), which decided where log lines go
  log::set_sink({});
  m_writer.reset();
  m_copy_writer.reset();
}

void Terminal::raw_write(int i, std::string_view text) {
  if (m_closed[i] || text.empty()) return;
  const bool written = m_writer ? m_writer->write(m_fds[i], text) : write_all(m_fds[i], text);
  if (written) return;
  m_closed[i] = true;
  // A pipe or socket whose reader ended; not a terminal that hung up (SIGHUP says that), nor a
  // full disk.
  struct stat st {};
  const bool pipe = ::fstat(m_fds[i], &st) == 0 && (S_ISFIFO(st.st_mode) || S_ISSOCK(st.st_mode));
  if (i == index(Stream::out) && m_out_reader_gone && pipe && reader_gone(m_fds[i])) m_out_reader_gone();
}

void Terminal::set_copy(int fd) {
  std::lock_guard lock(m_mutex);
  if (fd == m_copy_fd) return;
  // What is queued for the old copy is written before the caller may close it.
  m_copy_writer.reset();
  m_copy_fd = fd;
  if (m_writer && fd >= 0) m_copy_writer = std::make_unique<OutputWriter>();
}

void Terminal::copy(std::string_view text) {
  if (m_copy_fd < 0 || text.empty()) return;
  // Under the lock that dlrun's own lines take: the copy keeps their order among the ranks'.
  std::lock_guard lock(m_mutex);
  copy_locked(text);
}

void Terminal::copy_locked(std::string_view text) {
  if (m_copy_fd < 0) return;
  // The supervisor does not wait on the disk: queued for the copy's thread, if there is one.
  if (m_copy_writer) {
    m_copy_writer->write(m_copy_fd, text);
  } else {
    write_all(m_copy_fd, text);
  }
}

void Terminal::write(Stream stream, std::string_view text) {
  const int i = index(stream);
  if (text.empty()) return;
  std::lock_guard lock(m_mutex);
  // Live streams share one screen: lift the progress line, write, put it back below.
  const bool lift = m_progress.stream >= 0 && m_live[i];
  if (lift) raw_write(m_progress.stream, k_clear_line);
  raw_write(i, text);
  if (lift) raw_write(m_progress.stream, m_progress.line);
}

void Terminal::show_progress(Stream stream, const void* owner, std::string_view line) {
  const int i = index(stream);
  if (!m_live[i]) return;
  std::lock_guard lock(m_mutex);
  if (m_progress.stream >= 0 && m_progress.stream != i) raw_write(m_progress.stream, k_clear_line);
  m_progress = {i, owner, std::string(line)};
  std::string text(k_clear_line);
  text.append(line);
  raw_write(i, text);
}

void Terminal::end_progress(const void* owner, std::optional<Stream> stream) {
  std::lock_guard lock(m_mutex);
  if (m_progress.stream < 0 || m_progress.owner != owner) return;
  if (stream && m_progress.stream != index(*stream)) return;
  raw_write(m_progress.stream, k_clear_line);
  m_progress = {};
}

RankOutput::RankOutput(Options options, int log_fd, Terminal& terminal)
    : m_options(std::move(options)), m_log_fd(log_fd), m_terminal(terminal) {
  read_log_end();
  m_redraw_line_at[0] = m_redraw_line_at[1] = std::chrono::steady_clock::now();
}

RankOutput::~RankOutput() {
  m_terminal.end_progress(this);
  flush_log(Stream::out);
  flush_log(Stream::err);
  // What a full disk kept out of the log, said at its end when nothing came after it.
  if (m_log_fd >= 0) write_log_text(m_log_fd, "", m_log_gap);
  if (m_log_fd >= 0) ::close(m_log_fd);
}

void RankOutput::write_log(std::string_view data) {
  if (!data.empty()) m_log_last = data.back();
  if (m_log_fd < 0) return;
  // A full disk drops what it cannot take, says so in the log once there is room, and the log
  // goes on (it stopped for the rest of the run); another error gives the log up.
  if (!write_log_text(m_log_fd, data, m_log_gap)) {
    ::close(m_log_fd);
    m_log_fd = -1;
    return;
  }
  if (m_log_gap.lost > 0 && !m_log_gap.said) {
    m_log_gap.said = true;
    log::warn("cannot write {}: {}: its output is kept out of it until there is room (a line there will say how much)",
              m_options.log_name.empty() ? "a rank's log" : m_options.log_name, std::strerror(m_log_gap.error));
  }
}

namespace {
// An unfinished line held back longer than this goes to the log as it is (a rank that writes
// megabytes without a newline must not make dlrun hold them).
constexpr size_t k_max_log_pending = 64 * 1024;
constexpr int k_earlier_run = 2;  // m_log_partial_stream: the log ended mid-line when opened
constexpr size_t k_max_prompt = 60;  // an unfinished line shown as a prompt (show_unfinished)

bool ends_segment(char c) { return c == '\n' || c == '\r'; }
int stream_index(Stream stream) { return stream == Stream::err ? 1 : 0; }
}  // namespace

void RankOutput::read_log_end() {
  // The log may hold an earlier attempt's output (a restart, --resume), perhaps ending mid-line.
  struct stat st {};
  char last = '\n';
  if (m_log_fd >= 0 && ::fstat(m_log_fd, &st) == 0 && st.st_size > 0 &&
      ::pread(m_log_fd, &last, 1, st.st_size - 1) != 1) {
    last = '\n';  // opened write-only: taken as ending a line
  }
  m_log_last = last;
  m_log_gap.mid_line = last != '\n';
  m_log_partial_stream = ends_segment(last) ? -1 : k_earlier_run;
}

void RankOutput::log_stream(Stream stream, std::string_view chunk) {
  if (m_log_fd < 0) return;
  std::string& pending = m_log_pending[stream_index(stream)];
  // A segment ends at a newline or at a carriage return (a progress bar's redraw), so a bar
  // shows in the log as it goes, one redraw behind.
  const size_t end = chunk.find_last_of("\n\r");
  if (end != std::string_view::npos) {
    if (pending.empty()) {
      write_segment(stream, chunk.substr(0, end + 1));
    } else {
      pending.append(chunk.data(), end + 1);
      write_segment(stream, pending);
      pending.clear();
    }
    chunk.remove_prefix(end + 1);
  }
  pending.append(chunk.data(), chunk.size());
  if (pending.size() > k_max_log_pending) flush_log(stream);
}

void RankOutput::write_segment(Stream stream, std::string_view data) {
  // After a line the other stream (or an earlier run) left unfinished, a line of its own.
  if (m_log_partial_stream >= 0 && m_log_partial_stream != stream_index(stream)) write_log("\n");
  write_log(data);
  m_log_partial_stream = ends_segment(m_log_last) ? -1 : stream_index(stream);
}

void RankOutput::flush_log(Stream stream) {
  std::string& pending = m_log_pending[stream_index(stream)];
  if (pending.empty()) return;
  write_segment(stream, pending);
  pending.clear();
}

namespace {
constexpr std::string_view k_dlrun_open = "dlrun[", k_error_mark = "]: error: ";
constexpr size_t k_max_label = 256;

// Where the message after "]: error: " starts, or npos.
size_t dlrun_error_message(std::string_view line) {
  if (line.substr(0, k_dlrun_open.size()) != k_dlrun_open) return std::string_view::npos;
  const size_t close = line.find(']', k_dlrun_open.size());
  if (close == std::string_view::npos || close - k_dlrun_open.size() > k_max_label) return std::string_view::npos;
  if (line.substr(close, k_error_mark.size()) != k_error_mark) return std::string_view::npos;
  return close + k_error_mark.size();
}
}  // namespace

bool is_dlrun_error(std::string_view line) { return dlrun_error_message(line) != std::string_view::npos; }

std::string dlrun_error_text(std::string_view line) {
  const size_t at = dlrun_error_message(line);
  if (at == std::string_view::npos) return {};
  const std::string_view message = line.substr(at);
  return std::string(message.substr(0, message.find("; ")));
}

std::optional<int> rank_in_dlrun_error(std::string_view line) {
  constexpr std::string_view k_rank = "rank ";
  const size_t at = dlrun_error_message(line);
  if (at == std::string_view::npos || line.substr(at, k_rank.size()) != k_rank) return std::nullopt;
  const size_t digits = at + k_rank.size();
  size_t end = digits;
  while (end < line.size() && end - digits < 9 && line[end] >= '0' && line[end] <= '9') ++end;
  if (end == digits || end >= line.size() || line[end] != ' ') return std::nullopt;
  return std::stoi(std::string(line.substr(digits, end - digits)));
}

void RankOutput::take_line(Stream stream, std::string_view raw) {
  // A line longer than the splitter's limit comes in pieces; on a terminal of this rank alone,
  // unprefixed, they go on as one line (a JSON document that is one long line stays whole).
  const auto piece = splitter(stream).piece();
  bool& open = m_line_open[stream_index(stream)];
  if (piece == LineSplitter::Piece::end_of_cut) {
    if (open) m_batch += '\n';
    open = false;
    return;
  }
  // A bar's redraws show as their last state; a bar that cleared itself shows nothing.
  const std::string_view line = shown_segment(raw);
  if (line.empty() && !raw.empty()) return;
  // Its last state was passed on already as a redraw (no live terminal): not twice.
  std::string& said = m_redraw_said[stream_index(stream)];
  const bool repeated = !said.empty() && line == said;
  said.clear();
  // The prompt shown before it, answered: the line it ends shows what came after it (the echo
  // of the answer ended the prompt's row, which stays on the screen).
  std::string_view shown_line = line;
  if (std::string& prompt = m_prompt_shown[stream_index(stream)]; !prompt.empty()) {
    if (prompt_answered(stream) && shown_line.substr(0, prompt.size()) == prompt) shown_line.remove_prefix(prompt.size());
    prompt.clear();
  }
  if (m_options.shown && !repeated) {
    m_batch += stream == Stream::err ? m_options.err_prefix : m_options.out_prefix;
    m_batch.append(shown_line.data(), shown_line.size());
    open = piece == LineSplitter::Piece::cut && m_options.join_cut_lines;
    if (!open) m_batch += '\n';
  }
  if (m_terminal.copying() && !repeated) {
    m_copy_batch += m_options.copy_prefix;
    m_copy_batch.append(line.data(), line.size());
    m_copy_batch += '\n';
  }
  if (stream == Stream::err && m_options.tail_lines > 0) {
    if (m_tail.size() == m_options.tail_lines) m_tail.pop_front();
    m_tail.emplace_back(line);
  }
  if (stream == Stream::err && m_first_dlrun_error.empty() && is_dlrun_error(line)) {
    m_first_dlrun_error = std::string(line.substr(0, 4096));
  }
}

// An unfinished line that redraws itself is shown as it goes, on a live terminal.
bool RankOutput::prompt_answered(Stream stream) const {
  return !m_prompt_shown[stream_index(stream)].empty() && m_options.input_given &&
         m_options.input_given->load() != m_prompt_input_mark[stream_index(stream)];
}

void RankOutput::show_pending(Stream stream) {
  std::string_view pending = splitter(stream).pending_text();
  std::string& prompt = m_prompt_shown[stream_index(stream)];
  if (pending.find('\r') == std::string_view::npos) {
    // A prompt (pdb's "(Pdb) ", input("Name: ")) waits without a newline for what rank 0 reads
    // (--stdin). Only a short one: a long one would wrap, and its redraw leave rows behind.
    if (!m_options.show_unfinished || !m_terminal.live(stream) || !m_options.shown || pending.empty() ||
        pending.size() > k_max_prompt)
      return;
    if (prompt_answered(stream) && pending.substr(0, prompt.size()) == prompt) {
      // Answered: its row stays on the screen (the echo ended it); what follows is a row of its own.
      pending.remove_prefix(prompt.size());
      if (pending.empty()) return;
    } else {
      prompt.assign(pending.data(), pending.size());
      m_prompt_input_mark[stream_index(stream)] = m_options.input_given ? m_options.input_given->load() : 0;
    }
  } else {
    prompt.clear();
  }
  if (!m_terminal.live(stream)) return pass_on_redraw(stream, pending);
  if (!m_options.shown) return;
  const std::string_view shown = shown_segment(pending);
  if (shown.empty()) {
    m_terminal.end_progress(this);
    return;
  }
  std::string line(stream == Stream::err ? m_options.err_prefix : m_options.out_prefix);
  line.append(shown.data(), shown.size());
  m_terminal.show_progress(stream, this, line);
}

void RankOutput::pass_on_redraw(Stream stream, std::string_view pending) {
  auto& at = m_redraw_line_at[stream_index(stream)];
  const auto now = std::chrono::steady_clock::now();
  if (now - at < k_redraw_line_every) return;
  // What a terminal would show now, as the live path shows it.
  const std::string_view shown = shown_segment(pending);
  if (shown.empty()) return;
  at = now;
  m_redraw_said[stream_index(stream)].assign(shown.data(), shown.size());
  if (m_options.shown) {
    m_batch.assign(stream == Stream::err ? m_options.err_prefix : m_options.out_prefix);
    m_batch.append(shown.data(), shown.size());
    m_batch += '\n';
    m_terminal.write(stream, m_batch);
  }
  if (m_terminal.copying()) {
    m_copy_batch.assign(m_options.copy_prefix);
    m_copy_batch.append(shown.data(), shown.size());
    m_copy_batch += '\n';
    m_terminal.copy(m_copy_batch);
  }
}

void RankOutput::on_data(Stream stream, std::string_view chunk) {
  if (!chunk.empty()) m_last_output = std::chrono::steady_clock::now();
  log_stream(stream, chunk);
  m_batch.clear();
  m_copy_batch.clear();
  splitter(stream).feed(chunk, [&](std::string_view line) { take_line(stream, line); });
  // This rank's finished line takes the place of its progress line.
  if (!m_batch.empty()) m_terminal.end_progress(this, stream);
  m_terminal.write(stream, m_batch);
  m_terminal.copy(m_copy_batch);
  show_pending(stream);
}

void RankOutput::on_eof(Stream stream) {
  flush_log(stream);
  m_batch.clear();
  m_copy_batch.clear();
  splitter(stream).finish([&](std::string_view line) { take_line(stream, line); });
  m_terminal.end_progress(this, stream);
  m_terminal.write(stream, m_batch);
  m_terminal.copy(m_copy_batch);
}

void RankOutput::note_in_log(std::string_view line) {
  flush_log(Stream::out);  // a note goes after what the rank wrote before it
  flush_log(Stream::err);
  std::string text = m_log_last == '\n' ? std::string() : std::string("\n");
  text += line;
  text += '\n';
  write_log(text);
  m_log_partial_stream = -1;
}

}  // namespace dlrun::launcher
