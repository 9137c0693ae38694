#include "dlrun/launcher/run_record.hpp"

#include <stdlib.h>

#include <filesystem>
#include <fstream>

#include <doctest/doctest.h>

using namespace dlrun::launcher;

TEST_SUITE("launcher::RunRecord") {
  TEST_CASE("job.json is written and read back, bytes that are not UTF-8 do not stop it") {
    char pattern[] = "/tmp/dlrun-run-record-test-XXXXXX";
    const std::string dir = ::mkdtemp(pattern);
    RunRecord record;
    record.id = "20261123-120000-ab12";
    record.state = "running";
    record.world_size = 3;
    record.dlrun_pid = 4242;
    record.run_dir = dir;
    record.command = {"./train", "caf\xe9"};  // Latin-1, as a shell in a Latin-1 locale passes it
    write_run_record(dir, record);
    auto back = read_run_record(dir);
    REQUIRE(back);
    CHECK(back->id == record.id);
    CHECK(back->state == "running");
    CHECK(back->world_size == 3);
    CHECK(back->dlrun_pid == 4242);
    CHECK_FALSE(back->exit_code);
    CHECK(back->command == std::vector<std::string>{"./train", "caf\xef\xbf\xbd"});  // U+FFFD
    record.exit_code = 7;
    write_run_record(dir, record);
    CHECK(read_run_record(dir)->exit_code == 7);
    std::ofstream(dir + "/job.json") << "{\"id\": 3}";  // not one dlrun wrote
    CHECK_FALSE(read_run_record(dir));
    std::filesystem::remove_all(dir);
    CHECK_FALSE(read_run_record(dir));
  }
}
