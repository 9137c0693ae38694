#include "dlrun/launcher/free_port.hpp"

#include <cstdlib>
#include <ctime>
#include <filesystem>
#include <fstream>
#include <set>

#include <doctest/doctest.h>

using namespace dlrun::launcher;
namespace fs = std::filesystem;

namespace {
std::string scratch() {
  char pattern[] = "/tmp/dlrun-free-port-test-XXXXXX";
  return ::mkdtemp(pattern);
}
}  // namespace

TEST_SUITE("launcher::FreePort") {
  TEST_CASE("a port claimed in the last minute is not claimed again, older claims are dropped") {
    const std::string dir = scratch();
    const std::string claims = dir + "/port-claims";
    const double now = 1.8e9;  // the claims' times are the caller's, not the clock's
    CHECK(claim_port(claims, 40000, now));
    CHECK_FALSE(claim_port(claims, 40000, now + 1));
    CHECK(claim_port(claims, 40001, now + 1));
    CHECK(claim_port(claims, 40000, now + k_port_claim_seconds + 1));
    std::ifstream in(claims);
    std::string text((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
    CHECK(text == "40001 1800000001\n40000 1800000061\n");  // the stale claim is gone
    const auto private_file = fs::perms::owner_read | fs::perms::owner_write;
    CHECK((fs::status(claims).permissions() & fs::perms::all) == private_file);
    fs::remove_all(dir);
  }
  TEST_CASE("claims that cannot be kept claim nothing and refuse nothing") {
    const std::string dir = scratch();
    const double now = 1.8e9;
    CHECK(claim_port(dir + "/no/such/dir/port-claims", 40000, now));
    // A symlink in its place is not followed: the file it points to is left alone.
    const std::string target = dir + "/target";
    std::ofstream(target) << "keep\n";
    fs::create_symlink(target, dir + "/port-claims");
    CHECK(claim_port(dir + "/port-claims", 40000, now));
    CHECK(claim_port(dir + "/port-claims", 40000, now));
    std::ifstream in(target);
    std::string text((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
    CHECK(text == "keep\n");
    fs::remove_all(dir);
  }
  TEST_CASE("ports picked with claims differ, whatever the kernel hands out") {
    const std::string dir = scratch();
    std::set<int> ports;
    for (int i = 0; i < 200; ++i) ports.insert(pick_free_port("127.0.0.1", dir + "/port-claims"));
    CHECK(ports.size() == 200);  // without claims, about 1.4 repeats are expected
    fs::remove_all(dir);
  }
}
