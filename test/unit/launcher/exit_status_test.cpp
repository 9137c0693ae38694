#include "dlrun/launcher/exit_status.hpp"

#include <signal.h>
#include <sys/wait.h>

#include <doctest/doctest.h>

using dlrun::launcher::ExitStatus;

TEST_SUITE("launcher::ExitStatus") {
  TEST_CASE("a normal exit keeps the process's own code") {
    auto status = ExitStatus::from_wait_status(3 << 8);
    CHECK_FALSE(status.signaled);
    CHECK(status.shell_code() == 3);
    CHECK(status.describe() == "exited with code 3");
    CHECK_FALSE(status.success());
  }
  TEST_CASE("a signal gives 128 + its number and its name") {
    auto status = ExitStatus::killed(SIGKILL);
    CHECK(status.shell_code() == 137);
    CHECK(status.describe() == "was killed by signal 9 (SIGKILL)");
  }
  TEST_CASE("code 0 is success") { CHECK(ExitStatus::exited(0).success()); }
  TEST_CASE("signal names") {
    CHECK(dlrun::launcher::signal_name(SIGTERM) == "SIGTERM");
    CHECK(dlrun::launcher::signal_name(SIGSEGV) == "SIGSEGV");
  }
}
