#include "dlrun/launcher/ssh.hpp"

#include <algorithm>

#include <doctest/doctest.h>

using namespace dlrun::launcher;

TEST_SUITE("launcher::ssh") {
  TEST_CASE("the user's ssh options come before dlrun's defaults (ssh keeps the first value), after BatchMode") {
    SshSettings ssh;
    ssh.config_file = "cfg";
    ssh.options = {"ServerAliveInterval=7", "Port=2222"};
    ssh.connect_timeout_seconds = 3;
    auto argv = ssh_argv(ssh, "node1");
    const std::vector<std::string> expected = {
        "ssh", "-F", "cfg", "-o", "BatchMode=yes", "-o", "ServerAliveInterval=7", "-o", "Port=2222",
        "-o", "ConnectTimeout=3", "-o", "ServerAliveInterval=1", "-o", "ServerAliveCountMax=3", "node1"};
    CHECK(argv == expected);
  }
  TEST_CASE("words are quoted for the remote shell only where they need it") {
    CHECK(shell_quote("/usr/bin/dlrun") == "/usr/bin/dlrun");
    CHECK(shell_quote("a b") == "'a b'");
    CHECK(shell_quote("it's") == "'it'\\''s'");
    CHECK(shell_quote("") == "''");
  }
}
