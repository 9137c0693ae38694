#include "dlrun/launcher/output_writer.hpp"

#include <fcntl.h>
#include <signal.h>
#include <unistd.h>

#include <chrono>
#include <memory>
#include <set>
#include <string>

#include <doctest/doctest.h>

using dlrun::launcher::OutputWriter;
using namespace std::chrono_literals;

namespace {

// A pipe the test reads (or does not): the reader that does not keep up.
struct Pipe {
  int fds[2] = {-1, -1};
  Pipe() { REQUIRE(::pipe2(fds, O_CLOEXEC) == 0); }
  ~Pipe() {
    for (int fd : fds) {
      if (fd >= 0) ::close(fd);
    }
  }
  int in() const { return fds[1]; }
  // Reads until `size` bytes came (blocking).
  std::string read(size_t size) {
    std::string text;
    char buffer[65536];
    while (text.size() < size) {
      ssize_t n = ::read(fds[0], buffer, std::min(sizeof buffer, size - text.size()));
      REQUIRE(n > 0);
      text.append(buffer, static_cast<size_t>(n));
    }
    return text;
  }
  void close_reader() {
    ::close(fds[0]);
    fds[0] = -1;
  }
};

}  // namespace

TEST_SUITE("launcher::OutputWriter") {
  TEST_CASE("a reader that does not read holds up nothing, and what waits comes out in order once it reads") {
    Pipe pipe;
    OutputWriter writer;
    const std::string a(300000, 'a'), b(300000, 'b');  // far beyond a pipe's 64 KiB
    CHECK(writer.write(pipe.in(), a));
    CHECK(writer.write(pipe.in(), b));
    CHECK(writer.write(pipe.in(), "end\n"));
    CHECK(writer.pending_bytes() > 0);
    CHECK_FALSE(writer.flush(20ms));
    CHECK(pipe.read(a.size() + b.size() + 4) == a + b + "end\n");
    CHECK(writer.flush(30s));
    CHECK(writer.pending_bytes() == 0);
  }

  TEST_CASE("a reader that is gone makes writes to it fail, not others") {
    ::signal(SIGPIPE, SIG_IGN);  // as dlrun: EPIPE, not death
    Pipe gone, other;
    gone.close_reader();
    OutputWriter writer;
    writer.write(gone.in(), "lost\n");
    REQUIRE(writer.flush(30s));
    CHECK_FALSE(writer.write(gone.in(), "lost too\n"));
    CHECK(writer.write(other.in(), "kept\n"));
    CHECK(other.read(5) == "kept\n");
  }

  TEST_CASE("abandon drops what waits, names the reader that did not read, and does not wait for it") {
    ::signal(SIGPIPE, SIG_IGN);  // the write left in progress ends with EPIPE when the pipe goes
    Pipe stuck, fine;
    auto writer = std::make_unique<OutputWriter>();
    writer->write(fine.in(), "ok\n");
    REQUIRE(writer->flush(30s));
    writer->write(stuck.in(), std::string(1 << 20, 'x'));
    writer->write(fine.in(), "behind it\n");  // e.g. dlrun's message on a stderr that reads
    writer->write(stuck.in(), "more\n");
    CHECK_FALSE(writer->flush(20ms));
    const OutputWriter::Abandoned abandoned = writer->abandon();
    CHECK(abandoned.stuck == std::set<int>{stuck.in()});
    REQUIRE(abandoned.rest.size() == 1);
    CHECK(abandoned.rest[0] == std::pair<int, std::string>{fine.in(), "behind it\n"});
    CHECK(writer->pending_bytes() <= (1u << 20));
    CHECK_FALSE(writer->write(fine.in(), "after\n"));  // nothing is queued any more
    writer.reset();  // returns although the write in progress never ends
    CHECK(fine.read(3) == "ok\n");
  }
}
