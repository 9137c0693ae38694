#include "dlrun/launcher/resize.hpp"

#include <doctest/doctest.h>
#include <stdlib.h>

#include <filesystem>

using namespace dlrun::launcher;
namespace fs = std::filesystem;

TEST_SUITE("launcher::Resize") {
  TEST_CASE("a request goes through its file and back") {
    auto plain = parse_resize_request(format_resize_request({2, {}}));
    REQUIRE(plain);
    CHECK(plain->world_size == 2);
    CHECK(plain->gpu_ids.empty());
    CHECK(plain->unannounced == Unannounced::refuse);

    auto forced = parse_resize_request(format_resize_request({2, {"0", "3"}, Unannounced::restart}));
    REQUIRE(forced);
    CHECK(forced->gpu_ids == std::vector<std::string>{"0", "3"});
    CHECK(forced->unannounced == Unannounced::restart);
  }

  TEST_CASE("a request without its third line refuses, as before --force existed") {
    CHECK(format_resize_request({3, {}}) == "3\n\n");
    auto request = parse_resize_request("3\n\n");
    REQUIRE(request);
    CHECK(request->unannounced == Unannounced::refuse);
  }

  TEST_CASE("a request that does not hold together is none") {
    CHECK_FALSE(parse_resize_request("0\n\n"));
    CHECK_FALSE(parse_resize_request("x\n"));
    CHECK_FALSE(parse_resize_request("2\n0\n"));  // two ranks, one GPU
  }
  TEST_CASE("a job that is not elastic is told how to start one that is, on the command line or in job.toml") {
    const std::string why = check_resize(1, 2, 2);
    CHECK(why.find("the job is not elastic: it was started with 2 ranks") == 0);
    CHECK(why.find("--gpus 1:4") != std::string::npos);
    CHECK(why.find("gpus = \"1:4\"") != std::string::npos);  // a submitted job's job.toml
    CHECK(check_resize(5, 1, 4) == "5 ranks is outside the job's range 1:4");
    CHECK(check_resize(3, 1, 4).empty());
  }

  TEST_CASE("one requester at a time holds a job's resize lock, and it goes with its holder") {
    std::string pattern = (fs::temp_directory_path() / "dlrun-resize-XXXXXX").string();
    REQUIRE(::mkdtemp(pattern.data()) != nullptr);
    const std::string dir = pattern;
    {
      auto first = ResizeLock::try_take(dir);
      REQUIRE(first);
      CHECK(first->run_dir() == dir);
      CHECK_FALSE(ResizeLock::try_take(dir));  // held: refused at once, not waited for
      first.reset();
      CHECK(ResizeLock::try_take(dir));
      auto waited = ResizeLock::wait(dir);
      CHECK_FALSE(ResizeLock::try_take(dir));
    }
    CHECK(ResizeLock::try_take(dir));
    CHECK(ResizeLock::try_take(""));  // no run directory: a lock that holds nothing
    fs::remove_all(dir);
  }
}
