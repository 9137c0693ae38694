#include "dlrun/launcher/fd_io.hpp"

#include <doctest/doctest.h>
#include <fcntl.h>
#include <unistd.h>

#include <cstdlib>
#include <filesystem>
#include <string>

#include "dlrun/error.hpp"

using namespace dlrun::launcher;
namespace fs = std::filesystem;

namespace {

struct TempDir {
  fs::path path;
  TempDir() {
    std::string pattern = (fs::temp_directory_path() / "dlrun-fd-io-XXXXXX").string();
    path = ::mkdtemp(pattern.data());
  }
  ~TempDir() { fs::remove_all(path); }
  size_t entries() const {
    size_t n = 0;
    for ([[maybe_unused]] const auto& e : fs::directory_iterator(path)) ++n;
    return n;
  }
};

}  // namespace

TEST_SUITE("launcher::fd_io") {
  TEST_CASE("write_file_atomically writes a new file and replaces an old one whole") {
    TempDir dir;
    const std::string file = (dir.path / "picture.svg").string();
    write_file_atomically(file, "first");
    CHECK(read_file(file) == std::optional<std::string>("first"));
    write_file_atomically(file, "second, longer than the first");
    CHECK(read_file(file) == std::optional<std::string>("second, longer than the first"));
    CHECK(dir.entries() == 1);  // no temporary file left beside it
  }

  TEST_CASE("a write that cannot happen names the file and leaves what was there") {
    TempDir dir;
    // Into a directory that does not exist: the temporary file cannot be made.
    const std::string missing = (dir.path / "no-such-dir" / "x.svg").string();
    try {
      write_file_atomically(missing, "text");
      FAIL("no error");
    } catch (const dlrun::SystemError& e) {
      CHECK(std::string(e.what()).find("cannot write " + missing + ": ") == 0);
    }
    // Over a non-empty directory: the rename fails, the directory and its file stay, and the
    // temporary file is removed.
    const fs::path target = dir.path / "taken";
    fs::create_directory(target);
    write_file_atomically((target / "inside").string(), "kept");
    CHECK_THROWS_AS(write_file_atomically(target.string(), "text"), dlrun::SystemError);
    CHECK(read_file((target / "inside").string()) == std::optional<std::string>("kept"));
    CHECK(dir.entries() == 1);
  }

  TEST_CASE("a log that a full disk interrupts drops what it cannot take and says so once there is room") {
    TempDir dir;
    const std::string path = (dir.path / "rank-0.log").string();
    const int file = ::open(path.c_str(), O_WRONLY | O_CREAT | O_APPEND, 0644);
    const int full = ::open("/dev/full", O_WRONLY);
    REQUIRE(file >= 0);
    REQUIRE(full >= 0);
    const int fd = ::dup(file);
    LogGap gap;
    CHECK(write_log_text(fd, "line 1\nhalf", gap));
    CHECK(gap.lost == 0);
    ::dup2(full, fd);  // the disk is full now
    CHECK(write_log_text(fd, " of line 2\n", gap));
    CHECK(write_log_text(fd, "line 3\n", gap));
    CHECK(gap.lost == 18);
    CHECK(gap.error == ENOSPC);
    ::dup2(file, fd);  // room again
    CHECK(write_log_text(fd, "line 4\n", gap));
    CHECK(gap.lost == 0);
    CHECK(read_file(path) ==
          std::optional<std::string>("line 1\nhalf\n[dlrun: 18 bytes of output lost here: No space left on device]\nline 4\n"));
    // At the log's end, with nothing after the loss: the line alone, once there is room.
    ::dup2(full, fd);
    CHECK(write_log_text(fd, "line 5\n", gap));
    CHECK(write_log_text(fd, "", gap));  // still full: kept for later
    CHECK(gap.lost == 7);
    ::dup2(file, fd);
    CHECK(write_log_text(fd, "", gap));
    const std::string end = "line 4\n[dlrun: 7 bytes of output lost here: No space left on device]\n";
    const std::string all = *read_file(path);
    CHECK(all.substr(all.size() - end.size()) == end);
    // Another error (a closed file) gives it up.
    ::close(fd);
    CHECK_FALSE(write_log_text(fd, "x", gap));
    ::close(file);
    ::close(full);
  }
}
