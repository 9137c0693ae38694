#include "progress_beat.hpp"

#include <doctest/doctest.h>
#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <chrono>
#include <filesystem>
#include <thread>

namespace fs = std::filesystem;

namespace {
// Seconds since the file was last touched (a large number when it does not exist).
double age(const std::string& file) {
  struct stat st {};
  if (::stat(file.c_str(), &st) != 0) return 1e9;
  return static_cast<double>(::time(nullptr) - st.st_mtim.tv_sec);
}
void make_old(const std::string& file) {
  const timespec old[2] = {{1000, 0}, {1000, 0}};
  ::utimensat(AT_FDCWD, file.c_str(), old, 0);
}
}  // namespace

TEST_SUITE("runtime::ProgressBeat") {
  TEST_CASE("while it lives the watchdog's progress file is touched again and again, and after it no more") {
    const std::string file = (fs::temp_directory_path() / ("dlrun-beat-" + std::to_string(::getpid()))).string();
    {
      const dlrun::runtime::ProgressBeat beat(file);
      CHECK(age(file) < 100);  // touched (made) at once
      make_old(file);
      // Touched again by its thread (every second; a loaded machine may take longer).
      bool again = false;
      for (int i = 0; i < 200 && !again; ++i) {
        std::this_thread::sleep_for(std::chrono::milliseconds(50));
        again = age(file) < 100;
      }
      CHECK(again);
    }
    make_old(file);
    std::this_thread::sleep_for(std::chrono::milliseconds(1500));
    CHECK(age(file) > 100);  // its thread has ended
    fs::remove(file);
    const dlrun::runtime::ProgressBeat none("");  // outside dlrun: nothing
  }
}
