#include "dlrun/launcher/rank_output.hpp"

#include <fcntl.h>
#include <unistd.h>

#include <chrono>
#include <cstdlib>
#include <string>
#include <thread>

#include <doctest/doctest.h>

#include "dlrun/log.hpp"

using dlrun::launcher::RankOutput;
using dlrun::launcher::Stream;
using dlrun::launcher::Terminal;
using dlrun::launcher::is_dlrun_error;
using dlrun::launcher::rank_in_dlrun_error;

namespace {

// A Terminal whose two streams are pipes; read() takes what was written so far.
struct Screen {
  int out[2] = {-1, -1};
  int err[2] = {-1, -1};
  Screen() {
    REQUIRE(::pipe2(out, O_NONBLOCK) == 0);
    REQUIRE(::pipe2(err, O_NONBLOCK) == 0);
  }
  ~Screen() {
    for (int fd : {out[0], out[1], err[0], err[1]}) ::close(fd);
  }
  static std::string take(int fd) {
    std::string text;
    char buffer[4096];
    ssize_t n;
    while ((n = ::read(fd, buffer, sizeof buffer)) > 0) text.append(buffer, static_cast<size_t>(n));
    return text;
  }
  std::string read_err() { return take(err[0]); }
  std::string read_out() { return take(out[0]); }
};

RankOutput::Options prefixed(const std::string& prefix) {
  RankOutput::Options options;
  options.out_prefix = options.err_prefix = prefix;
  return options;
}

}  // namespace

TEST_SUITE("launcher::RankOutput") {
  TEST_CASE("on a live terminal a progress bar is redrawn in place, other lines go above it") {
    Screen screen;
    Terminal terminal(screen.out[1], screen.err[1]);
    terminal.set_live(Stream::out, true);
    terminal.set_live(Stream::err, true);
    RankOutput rank0(prefixed("[0] "), -1, terminal);
    RankOutput rank1(prefixed("[1] "), -1, terminal);

    rank0.on_data(Stream::err, "\r 10%|#");
    CHECK(screen.read_err() == "\r\x1b[K[0]  10%|#");
    rank0.on_data(Stream::err, "#|\r 20%|##|");
    CHECK(screen.read_err() == "\r\x1b[K[0]  20%|##|");
    // Another rank's line: the bar is lifted, the line written, the bar put back below it.
    rank1.on_data(Stream::err, "hello\n");
    CHECK(screen.read_err() == "\r\x1b[K[1] hello\n[0]  20%|##|");
    // The bar's own end: its last state stays as a line.
    rank0.on_data(Stream::err, "\r100%|###|\n");
    CHECK(screen.read_err() == "\r\x1b[K[0] 100%|###|\n");
    rank1.on_data(Stream::err, "bye\n");
    CHECK(screen.read_err() == "[1] bye\n");
  }

  TEST_CASE("dlrun's own log lines lift the progress bar too, from any thread") {
    // They were written straight after the bar ("[0]  20%|##|dlrun: error: …").
    Screen screen;
    {
      Terminal terminal(screen.out[1], screen.err[1]);
      terminal.set_live(Stream::out, true);
      terminal.set_live(Stream::err, true);
      terminal.write_in_background();
      RankOutput rank0(prefixed("[0] "), -1, terminal);
      rank0.on_data(Stream::err, "\r 20%|##|");
      std::thread([] { dlrun::log::error("rank 1 exited with code 3"); }).join();
      REQUIRE(terminal.flush(std::chrono::seconds(10)));
      CHECK(screen.read_err() == "\r\x1b[K[0]  20%|##|\r\x1b[Kdlrun: error: rank 1 exited with code 3\n[0]  20%|##|");
      terminal.stop_background();
    }
  }

  TEST_CASE("a bar that clears itself leaves nothing, stdout lines go above a stderr bar") {
    Screen screen;
    Terminal terminal(screen.out[1], screen.err[1]);
    terminal.set_live(Stream::out, true);
    terminal.set_live(Stream::err, true);
    RankOutput rank0(prefixed("[0] "), -1, terminal);
    rank0.on_data(Stream::err, "\repoch 1 [##  ]");
    CHECK(screen.read_err() == "\r\x1b[K[0] epoch 1 [##  ]");
    rank0.on_data(Stream::out, "epoch 1: loss 0.3\n");
    CHECK(screen.read_err() == "\r\x1b[K[0] epoch 1 [##  ]");
    CHECK(screen.read_out() == "[0] epoch 1: loss 0.3\n");
    rank0.on_data(Stream::err, "\r\x1b[K");  // the bar clears itself
    CHECK(screen.read_err() == "\r\x1b[K");
    rank0.on_data(Stream::out, "epoch 2: loss 0.2\n");  // nothing to put back
    CHECK(screen.read_err().empty());
    CHECK(screen.read_out() == "[0] epoch 2: loss 0.2\n");
    rank0.on_eof(Stream::err);
    CHECK(screen.read_err().empty());
  }

  TEST_CASE("not on a terminal: whole lines only, a bar's last state when its line ends") {
    Screen screen;
    Terminal terminal(screen.out[1], screen.err[1]);
    RankOutput rank0(prefixed("[0] "), -1, terminal);
    rank0.on_data(Stream::err, "\r 10%\r 20%");
    CHECK(screen.read_err().empty());
    rank0.on_data(Stream::err, "\r100%\n");
    CHECK(screen.read_err() == "[0] 100%\n");
    CHECK(rank0.stderr_tail().back() == "100%");
  }

  TEST_CASE("the log keeps each stream's lines whole, every byte of them") {
    // A stderr chunk that arrives in the middle of a stdout line (a bar beside print()) went
    // into the log inside that line.
    Screen screen;
    Terminal terminal(screen.out[1], screen.err[1]);
    char path[] = "/tmp/dlrun-rank-log-XXXXXX";
    int log[2] = {-1, ::mkstemp(path)};  // [0] reads what [1] wrote so far
    REQUIRE(log[1] >= 0);
    log[0] = ::open(path, O_RDONLY);
    {
      RankOutput rank0(prefixed("[0] "), log[1], terminal);
      rank0.on_data(Stream::out, "epoch 1: ");
      rank0.on_data(Stream::err, "\r 10%|#");  // a bar's redraw ends at the next one's \r
      rank0.on_data(Stream::out, "loss 0.3\nepoch 2");
      CHECK(Screen::take(log[0]) == "\repoch 1: loss 0.3\n");
      rank0.on_data(Stream::err, "\r 20%|#");
      CHECK(Screen::take(log[0]) == " 10%|#\r");
      rank0.on_data(Stream::err, "#|\r100%|##|\n");
      CHECK(Screen::take(log[0]) == " 20%|##|\r100%|##|\n");
      rank0.note_in_log("==> dlrun: restart 1 <==");  // on a line of its own
      CHECK(Screen::take(log[0]) == "epoch 2\n==> dlrun: restart 1 <==\n");
      rank0.on_data(Stream::err, "no newline at the end");
      rank0.on_eof(Stream::err);
      CHECK(Screen::take(log[0]) == "no newline at the end");
      // A segment past 64 KiB goes as it is; after the other stream's unfinished line, on a line
      // of its own.
      rank0.on_data(Stream::out, std::string(70 * 1024, 'x'));
      CHECK(Screen::take(log[0]) == "\n" + std::string(70 * 1024, 'x'));
      rank0.on_data(Stream::out, "tail");
    }
    CHECK(Screen::take(log[0]) == "tail");  // what is left goes in when the output is done
    // The next attempt's note, through another RankOutput on the same file, starts a line.
    {
      RankOutput again(prefixed("[0] "), ::open(path, O_RDWR | O_APPEND), terminal);
      again.note_in_log("==> dlrun: restart 2 <==");
      again.on_data(Stream::err, "err\n");
    }
    CHECK(Screen::take(log[0]) == "\n==> dlrun: restart 2 <==\nerr\n");
    ::unlink(path);
    ::close(log[0]);
  }

  TEST_CASE("a rank that is not shown draws no bar") {
    Screen screen;
    Terminal terminal(screen.out[1], screen.err[1]);
    terminal.set_live(Stream::err, true);
    auto options = prefixed("[3] ");
    options.shown = false;
    RankOutput rank3(options, -1, terminal);
    rank3.on_data(Stream::err, "\r 10%");
    rank3.on_data(Stream::err, "\r 20%\n");
    CHECK(screen.read_err().empty());
  }
  TEST_CASE("a nested dlrun's error line, and the rank it names") {
    CHECK(is_dlrun_error("dlrun[node-1]: error: rank 5 exited with code 6"));
    CHECK(rank_in_dlrun_error("dlrun[node-1]: error: rank 5 exited with code 6") == 5);
    CHECK(is_dlrun_error("dlrun[a]: error: --gpu-ids 1,7: GPU 7 does not exist"));
    CHECK_FALSE(rank_in_dlrun_error("dlrun[a]: error: --gpu-ids 1,7: GPU 7 does not exist"));
    CHECK_FALSE(is_dlrun_error("dlrun: error: rank 5 exited"));  // this dlrun's own, not a host's
    CHECK_FALSE(is_dlrun_error("[localhost:1] dlrun[a]: error: rank 5 exited"));
    CHECK_FALSE(is_dlrun_error("dlrun[" + std::string(1 << 20, 'x')));  // no ']': not one, and no stack spent
    CHECK_FALSE(rank_in_dlrun_error("dlrun[a]: error: rank 99999999999 exited"));
    CHECK_FALSE(rank_in_dlrun_error("dlrun[a]: error: rank 5"));
  }
}
