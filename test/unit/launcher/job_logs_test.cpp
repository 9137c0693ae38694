#include "dlrun/launcher/job_logs.hpp"

#include <unistd.h>

#include <filesystem>
#include <fstream>

#include <doctest/doctest.h>

using namespace dlrun::launcher;

namespace {
struct TempFile {
  std::string path;
  explicit TempFile(const std::string& text) {
    char pattern[] = "/tmp/dlrun-log-XXXXXX";
    int fd = ::mkstemp(pattern);
    ::close(fd);
    path = pattern;
    std::ofstream(path, std::ios::binary) << text;
  }
  ~TempFile() { std::filesystem::remove(path); }
};
}  // namespace

TEST_SUITE("launcher::JobLogs") {
  TEST_CASE("the tail of a log: its last lines, a last line without a newline too") {
    TempFile log("one\ntwo\nthree\n");
    CHECK(read_log_tail(log.path, 2).lines == std::vector<std::string>{"two", "three"});
    CHECK(read_log_tail(log.path, 10).lines == std::vector<std::string>{"one", "two", "three"});
    TempFile unfinished("one\n\ntwo");
    CHECK(read_log_tail(unfinished.path, 10).lines == std::vector<std::string>{"one", "", "two"});
    TempFile empty("");
    CHECK(read_log_tail(empty.path, 5).exists);
    CHECK(read_log_tail(empty.path, 5).lines.empty());
    CHECK_FALSE(read_log_tail("/nonexistent/rank-0.log", 5).exists);
  }
  TEST_CASE("a long log: only its end is read, and a line cut by that is not shown") {
    std::string text;
    for (int i = 0; i < 20000; ++i) text += "line " + std::to_string(i) + "\n";
    TempFile log(text);
    auto tail = read_log_tail(log.path, 3);
    CHECK(tail.lines == std::vector<std::string>{"line 19997", "line 19998", "line 19999"});
    auto many = read_log_tail(log.path, 100000);
    CHECK(many.lines.back() == "line 19999");
    CHECK(many.lines.size() < 20000);
    CHECK(many.lines.front().rfind("line ", 0) == 0);  // whole lines only
  }
  TEST_CASE("a last line longer than the tail read: its end, and a bar as a terminal leaves it") {
    // A progress bar redrawn for 200 KB without a newline, then a crash: the report called
    // the log empty.
    std::string bar = "loading\n";
    for (int i = 0; i < 20000; ++i) bar += "\r step " + std::to_string(i);
    TempFile log(bar);
    CHECK(read_log_tail(log.path, 5).lines == std::vector<std::string>{" step 19999"});
    TempFile long_line(std::string(70000, 'x') + "\n");
    auto tail = read_log_tail(long_line.path, 5);
    REQUIRE(tail.lines.size() == 1);
    CHECK(tail.lines[0] == "…" + std::string(4096, 'x'));
    TempFile redrawn("a\r 50%\r100%\nb\n");
    CHECK(read_log_tail(redrawn.path, 5).lines == std::vector<std::string>{"100%", "b"});
  }
}
