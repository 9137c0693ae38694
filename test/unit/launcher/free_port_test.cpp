#include "dlrun/launcher/free_port.hpp"


#include <cstdlib>
#include <ctime>
#include <filesystem>
#include <fstream>
#include <set>

#include <doctest/doctest.h>

using namespace dlrun::launcher;
namespace fs = std::filesystem;

TEST_SUITE("launcher::FreePort") {
  TEST_CASE("a port claimed in the last minute is not claimed again; an older claim is taken over") {
    char pattern[] = "/tmp/dlrun-free-port-test-XXXXXX";
    const std::string dir = std::string(::mkdtemp(pattern)) + "/ports";  // made on first use
    const double now = static_cast<double>(std::time(nullptr));
    CHECK(reserve_port(dir, 40000, now));
    CHECK_FALSE(reserve_port(dir, 40000, now + 1));
    CHECK(reserve_port(dir, 40001, now + 1));
    // A minute later the claims are stale: removed, and the port can be claimed again.
    CHECK(reserve_port(dir, 40000, now + k_port_reservation_seconds + 2));
    CHECK_FALSE(fs::exists(dir + "/40001"));
    // Where claims cannot be kept (the directory is a file), the kernel's pick stands.
    const std::string file = dir + "/../not-a-dir";
    std::ofstream(file) << "x";
    CHECK(reserve_port(file, 40002, now));
    fs::remove_all(fs::path(dir).parent_path());
  }
  TEST_CASE("ports picked with claims differ, whatever the kernel hands out") {
    char pattern[] = "/tmp/dlrun-free-port-test-XXXXXX";
    const std::string dir = std::string(::mkdtemp(pattern)) + "/ports";
    std::set<int> ports;
    for (int i = 0; i < 200; ++i) ports.insert(pick_free_port("127.0.0.1", dir));
    CHECK(ports.size() == 200);
    fs::remove_all(fs::path(dir).parent_path());
  }
}
