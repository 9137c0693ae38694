#include "stop_signal.hpp"

#include <doctest/doctest.h>

#include <csignal>

namespace stop_signal = dlrun::runtime::stop_signal;

TEST_SUITE("runtime::stop_signal") {
  TEST_CASE("SIGUSR1 and SIGTERM set the flag instead of ending the process") {
    stop_signal::install();
    stop_signal::clear();
    CHECK_FALSE(stop_signal::pending());
    std::raise(SIGUSR1);
    CHECK(stop_signal::pending());
    stop_signal::clear();
    std::raise(SIGTERM);
    CHECK(stop_signal::pending());
    stop_signal::clear();
  }
}
