#include "dlrun/launcher/process.hpp"

#include <signal.h>
#include <unistd.h>

#include <doctest/doctest.h>

using dlrun::launcher::process_handles_signal;
using dlrun::launcher::status_handles_signal;

TEST_SUITE("launcher::process") {
  TEST_CASE("a process handles a signal it catches or ignores, as /proc/PID/status says") {
    // SIGUSR1 is bit 9 (0x200), SIGUSR2 bit 11 (0x800), SIGTERM bit 14 (0x4000).
    const std::string status =
        "Name:\tsh\nSigQ:\t0/95058\nSigPnd:\t0000000000000000\nSigBlk:\t0000000000000000\n"
        "SigIgn:\t0000000000000800\nSigCgt:\t0000000000004200\n";
    CHECK(status_handles_signal(status, SIGUSR1));   // caught
    CHECK(status_handles_signal(status, SIGUSR2));   // ignored
    CHECK(status_handles_signal(status, SIGTERM));   // caught
    CHECK_FALSE(status_handles_signal(status, SIGINT));
    CHECK_FALSE(status_handles_signal("Name:\tzombie\n", SIGUSR1));  // no masks: an ended process
    CHECK_FALSE(status_handles_signal(status, 0));
    CHECK_FALSE(status_handles_signal(status, 65));
  }

  TEST_CASE("this process's own masks, read from /proc") {
    struct sigaction old {};
    struct sigaction ignore {};
    ignore.sa_handler = SIG_IGN;
    ::sigaction(SIGUSR2, &ignore, &old);
    CHECK(process_handles_signal(::getpid(), SIGUSR2));
    ::sigaction(SIGUSR2, &old, nullptr);
    CHECK_FALSE(process_handles_signal(::getpid(), SIGUSR2));
    CHECK_FALSE(process_handles_signal(0x7ffffff0, SIGUSR1));  // no such process
  }
}
