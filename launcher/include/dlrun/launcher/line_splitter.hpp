#pragma once
// Cuts a byte stream (a rank's stdout or stderr, read in arbitrary chunks) into whole
// lines, so that the terminal never shows two ranks inside one line. A line longer than
// max_line bytes is cut there and passed on in pieces, so one rank that never writes a
// newline cannot make dlrun buffer without bound, and a line that redraws itself with '\r'
// (a progress bar) keeps only its last redraws (carriage_return.hpp). Pure; one instance per
// stream; not thread-safe.

#include <cstddef>
#include <functional>
#include <string>
#include <string_view>

namespace dlrun::launcher {

class LineSplitter {
 public:
  // Receives each line without its '\n'.
  using LineHandler = std::function<void(std::string_view line)>;

  explicit LineSplitter(size_t max_line = 1 << 20) : m_max_line(max_line) {}

  void feed(std::string_view chunk, const LineHandler& on_line);
  // Passes on a last line that had no '\n' (at end of stream).
  void finish(const LineHandler& on_line);
  size_t pending() const { return m_partial.size(); }
  // The unfinished line so far (a progress bar's redraws, or a line still being written).
  std::string_view pending_text() const { return m_partial; }
  // What the line passed on now is: a whole line, a piece cut at max_line (its line goes on),
  // or the empty end of a line that was cut (its '\n' came alone; for a reader that left the
  // cut line open, otherwise nothing).
  enum class Piece { whole, cut, end_of_cut };
  Piece piece() const { return m_piece; }

 private:
  size_t m_max_line;
  std::string m_partial;
  bool m_cut = false;  // the last line passed on was cut at max_line, and nothing came since
  Piece m_piece = Piece::whole;
};

}  // namespace dlrun::launcher
