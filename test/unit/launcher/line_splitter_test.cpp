#include "dlrun/launcher/line_splitter.hpp"

#include <string>
#include <vector>

#include <doctest/doctest.h>

using dlrun::launcher::LineSplitter;

namespace {
struct Collector {
  std::vector<std::string> lines;
  LineSplitter::LineHandler handler() {
    return [this](std::string_view line) { lines.emplace_back(line); };
  }
};
}  // namespace

TEST_SUITE("launcher::LineSplitter") {
  TEST_CASE("whole lines pass through") {
    LineSplitter splitter;
    Collector c;
    splitter.feed("a\nbb\n", c.handler());
    CHECK(c.lines == std::vector<std::string>{"a", "bb"});
    CHECK(splitter.pending() == 0);
  }
  TEST_CASE("a line split across chunks comes out whole") {
    LineSplitter splitter;
    Collector c;
    splitter.feed("hel", c.handler());
    CHECK(c.lines.empty());
    splitter.feed("lo\nwor", c.handler());
    splitter.feed("ld\n", c.handler());
    CHECK(c.lines == std::vector<std::string>{"hello", "world"});
  }
  TEST_CASE("the last line without newline comes out at finish") {
    LineSplitter splitter;
    Collector c;
    splitter.feed("x\ntail", c.handler());
    splitter.finish(c.handler());
    CHECK(c.lines == std::vector<std::string>{"x", "tail"});
  }
  TEST_CASE("empty lines are kept") {
    LineSplitter splitter;
    Collector c;
    splitter.feed("\n\nx\n", c.handler());
    CHECK(c.lines == std::vector<std::string>{"", "", "x"});
  }
  TEST_CASE("an endless line is cut at max_line") {
    LineSplitter splitter(4);
    Collector c;
    splitter.feed("abcdefghij", c.handler());
    CHECK(c.lines == std::vector<std::string>{"abcd", "efgh"});
    splitter.feed("\n", c.handler());
    CHECK(c.lines.back() == "ij");
  }
  TEST_CASE("a line cut exactly at max_line gets no empty line after it") {
    LineSplitter splitter(4);
    Collector c;
    splitter.feed("abcd", c.handler());
    CHECK(c.lines == std::vector<std::string>{"abcd"});
    splitter.feed("\nnext\n\n", c.handler());
    CHECK(c.lines == std::vector<std::string>{"abcd", "next", ""});  // an empty line of its own stays
    // The same bytes in one chunk give the same lines.
    LineSplitter whole(4);
    Collector w;
    whole.feed("abcd\nnext\n\n", w.handler());
    CHECK(w.lines == c.lines);
    // Cut, then more of the line: its newline ends that rest.
    LineSplitter more(4);
    Collector m;
    more.feed("abcdef", m.handler());
    more.feed("\n", m.handler());
    CHECK(m.lines == std::vector<std::string>{"abcd", "ef"});
  }
  TEST_CASE("byte by byte gives the same lines as all at once") {
    std::string text = "one\ntwo three\n\nfour\nfive";
    LineSplitter a, b;
    Collector ca, cb;
    a.feed(text, ca.handler());
    a.finish(ca.handler());
    for (char ch : text) b.feed(std::string_view(&ch, 1), cb.handler());
    b.finish(cb.handler());
    CHECK(ca.lines == cb.lines);
  }
}
