#include "dlrun/launcher/rank_output.hpp"

#include <unistd.h>

#include <cerrno>

#include "dlrun/launcher/fd_io.hpp"

namespace dlrun::launcher {

void Terminal::write(Stream stream, std::string_view text) {
  int i = stream == Stream::out ? 0 : 1;
  if (m_closed[i] || text.empty()) return;
  if (!write_all(m_fds[i], text)) m_closed[i] = true;
}

RankOutput::RankOutput(Options options, int log_fd, Terminal& terminal)
    : m_options(std::move(options)), m_log_fd(log_fd), m_terminal(terminal) {}

RankOutput::~RankOutput() {
  if (m_log_fd >= 0) ::close(m_log_fd);
}

void RankOutput::write_log(std::string_view data) {
  if (m_log_fd >= 0 && !write_all(m_log_fd, data)) {
    ::close(m_log_fd);  // disk full or similar: keep the terminal going
    m_log_fd = -1;
  }
}

void RankOutput::take_line(Stream stream, std::string_view line) {
  if (m_options.shown) {
    m_batch += stream == Stream::err ? m_options.err_prefix : m_options.out_prefix;
    m_batch.append(line.data(), line.size());
    m_batch += '\n';
  }
  if (stream == Stream::err && m_options.tail_lines > 0) {
    if (m_tail.size() == m_options.tail_lines) m_tail.pop_front();
    m_tail.emplace_back(line);
  }
}

void RankOutput::on_data(Stream stream, std::string_view chunk) {
  write_log(chunk);
  m_batch.clear();
  splitter(stream).feed(chunk, [&](std::string_view line) { take_line(stream, line); });
  m_terminal.write(stream, m_batch);
}

void RankOutput::on_eof(Stream stream) {
  m_batch.clear();
  splitter(stream).finish([&](std::string_view line) { take_line(stream, line); });
  m_terminal.write(stream, m_batch);
}

void RankOutput::note_in_log(std::string_view line) {
  std::string text(line);
  text += '\n';
  write_log(text);
}

}  // namespace dlrun::launcher
