#include "dlrun/launcher/line_splitter.hpp"

#include <string>
#include <vector>

#include <doctest/doctest.h>

using dlrun::launcher::LineSplitter;

namespace {
struct Collector {
  std::vector<std::string> lines;
  std::vector<LineSplitter::Piece> pieces;
  // The end of a cut line (its '\n' alone) is no line of its own.
  LineSplitter::LineHandler handler(const LineSplitter& splitter) {
    return [this, &splitter](std::string_view line) {
      if (splitter.piece() == LineSplitter::Piece::end_of_cut) return;
      lines.emplace_back(line);
      pieces.push_back(splitter.piece());
    };
  }
};
}  // namespace

TEST_SUITE("launcher::LineSplitter") {
  TEST_CASE("whole lines pass through") {
    LineSplitter splitter;
    Collector c;
    splitter.feed("a\nbb\n", c.handler(splitter));
    CHECK(c.lines == std::vector<std::string>{"a", "bb"});
    CHECK(splitter.pending() == 0);
  }
  TEST_CASE("a line split across chunks comes out whole") {
    LineSplitter splitter;
    Collector c;
    splitter.feed("hel", c.handler(splitter));
    CHECK(c.lines.empty());
    splitter.feed("lo\nwor", c.handler(splitter));
    splitter.feed("ld\n", c.handler(splitter));
    CHECK(c.lines == std::vector<std::string>{"hello", "world"});
  }
  TEST_CASE("the last line without newline comes out at finish") {
    LineSplitter splitter;
    Collector c;
    splitter.feed("x\ntail", c.handler(splitter));
    splitter.finish(c.handler(splitter));
    CHECK(c.lines == std::vector<std::string>{"x", "tail"});
  }
  TEST_CASE("empty lines are kept") {
    LineSplitter splitter;
    Collector c;
    splitter.feed("\n\nx\n", c.handler(splitter));
    CHECK(c.lines == std::vector<std::string>{"", "", "x"});
  }
  TEST_CASE("an endless line is cut at max_line") {
    LineSplitter splitter(4);
    Collector c;
    splitter.feed("abcdefghij", c.handler(splitter));
    CHECK(c.lines == std::vector<std::string>{"abcd", "efgh"});
    splitter.feed("\n", c.handler(splitter));
    CHECK(c.lines.back() == "ij");
  }
  TEST_CASE("a line cut exactly at max_line gets no empty line after it") {
    LineSplitter splitter(4);
    Collector c;
    splitter.feed("abcd", c.handler(splitter));
    CHECK(c.lines == std::vector<std::string>{"abcd"});
    splitter.feed("\nnext\n\n", c.handler(splitter));
    CHECK(c.lines == std::vector<std::string>{"abcd", "next", ""});  // an empty line of its own stays
    // The same bytes in one chunk give the same lines.
    LineSplitter whole(4);
    Collector w;
    whole.feed("abcd\nnext\n\n", w.handler(whole));
    CHECK(w.lines == c.lines);
    // Cut, then more of the line: its newline ends that rest.
    LineSplitter more(4);
    Collector m;
    more.feed("abcdef", m.handler(more));
    more.feed("\n", m.handler(more));
    CHECK(m.lines == std::vector<std::string>{"abcd", "ef"});
    CHECK(m.pieces == std::vector<LineSplitter::Piece>{LineSplitter::Piece::cut, LineSplitter::Piece::whole});
    // A line cut exactly at max_line, then its newline alone: the end of the cut line.
    LineSplitter exact(4);
    std::vector<LineSplitter::Piece> seen;
    const auto record = [&](std::string_view) { seen.push_back(exact.piece()); };
    exact.feed("abcd", record);
    exact.feed("\nx\n", record);
    CHECK(seen == std::vector<LineSplitter::Piece>{LineSplitter::Piece::cut, LineSplitter::Piece::end_of_cut,
                                                   LineSplitter::Piece::whole});
  }
  TEST_CASE("byte by byte gives the same lines as all at once") {
    std::string text = "one\ntwo three\n\nfour\nfive";
    LineSplitter a, b;
    Collector ca, cb;
    a.feed(text, ca.handler(a));
    a.finish(ca.handler(a));
    for (char ch : text) b.feed(std::string_view(&ch, 1), cb.handler(b));
    b.finish(cb.handler(b));
    CHECK(ca.lines == cb.lines);
  }
}
