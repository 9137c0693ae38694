#include "dlrun/launcher/line_splitter.hpp"

#include "dlrun/launcher/carriage_return.hpp"

namespace dlrun::launcher {

void LineSplitter::feed(std::string_view chunk, const LineHandler& on_line) {
  while (!chunk.empty()) {
    size_t newline = chunk.find('\n');
    if (newline == std::string_view::npos) {
      m_partial.append(chunk.data(), chunk.size());
      m_cut = false;
      if (chunk.find('\r') != std::string_view::npos) drop_replaced_redraws(m_partial);
      while (m_partial.size() >= m_max_line) {
        m_piece = Piece::cut;
        on_line(std::string_view(m_partial).substr(0, m_max_line));
        m_piece = Piece::whole;
        m_partial.erase(0, m_max_line);
        m_cut = m_partial.empty();
      }
      return;
    }
    if (m_partial.empty()) {
      // The newline that ends a line just cut at max_line is that line's end, not an empty line.
      m_piece = newline == 0 && m_cut ? Piece::end_of_cut : Piece::whole;
      on_line(chunk.substr(0, newline));
      m_piece = Piece::whole;
    } else {
      m_partial.append(chunk.data(), newline);
      on_line(m_partial);
      m_partial.clear();
    }
    m_cut = false;
    chunk.remove_prefix(newline + 1);
  }
}

void LineSplitter::finish(const LineHandler& on_line) {
  if (m_partial.empty()) return;
  on_line(m_partial);
  m_partial.clear();
}

}  // namespace dlrun::launcher
