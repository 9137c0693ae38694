#include "stop_signal.hpp"

#include <doctest/doctest.h>
#include <sys/wait.h>
#include <unistd.h>

#include <csignal>
#include <initializer_list>

namespace stop_signal = dlrun::runtime::stop_signal;

namespace {

volatile std::sig_atomic_t g_own_handler_ran = 0;
extern "C" void own_handler(int) {
  g_own_handler_ran = 1;
}

// How a child ends that installs the handlers over `before` (SIGTERM's and SIGINT's), maybe
// asks for stop requests, and raises `signal` `times` times: exit code 0 when the signals only
// set the flag, 2 when they ran `before`.
int child_status(bool asks, int signal, int times, void (*before)(int) = SIG_DFL) {
  const pid_t pid = ::fork();
  if (pid == 0) {
    // Not doctest's own handlers, which would report.
    std::signal(SIGTERM, before);
    std::signal(SIGINT, before);
    stop_signal::install();
    stop_signal::clear();
    stop_signal::mark_asked(asks);
    for (int i = 0; i < times; ++i) std::raise(signal);
    ::_exit(g_own_handler_ran ? 2 : stop_signal::pending() ? 0 : 1);
  }
  int status = 0;
  ::waitpid(pid, &status, 0);
  return status;
}

}  // namespace

TEST_SUITE("runtime::stop_signal") {
  TEST_CASE("SIGUSR1 and SIGTERM set the flag instead of ending the process once it asks") {
    stop_signal::install();
    stop_signal::mark_asked();
    stop_signal::clear();
    CHECK_FALSE(stop_signal::pending());
    std::raise(SIGUSR1);
    CHECK(stop_signal::pending());
    stop_signal::clear();
    std::raise(SIGTERM);
    CHECK(stop_signal::pending());
    stop_signal::clear();
  }

  TEST_CASE("before the program asks for stop requests SIGTERM and SIGINT end it, SIGUSR1 does not") {
    for (int signal : {SIGTERM, SIGINT}) {
      const int status = child_status(false, signal, 1);
      CHECK(WIFSIGNALED(status));
      CHECK(WTERMSIG(status) == signal);
    }
    const int usr1 = child_status(false, SIGUSR1, 1);
    CHECK((WIFEXITED(usr1) && WEXITSTATUS(usr1) == 0));
  }

  TEST_CASE("before the program asks the first SIGINT goes to the handler it had before") {
    const int once = child_status(false, SIGINT, 1, own_handler);  // Python's KeyboardInterrupt
    CHECK((WIFEXITED(once) && WEXITSTATUS(once) == 2));
    const int twice = child_status(false, SIGINT, 2, own_handler);
    CHECK(WIFSIGNALED(twice));
    const int asked = child_status(true, SIGTERM, 1, own_handler);
    CHECK((WIFEXITED(asked) && WEXITSTATUS(asked) == 0));
  }

  TEST_CASE("before the program asks an ignored signal stays ignored") {
    const int ignored = child_status(false, SIGTERM, 2, SIG_IGN);
    CHECK((WIFEXITED(ignored) && WEXITSTATUS(ignored) == 1));  // alive, and no stop request
  }

  TEST_CASE("a signal before the program asked does not make the first one after it the second") {
    const pid_t pid = ::fork();
    if (pid == 0) {
      std::signal(SIGTERM, SIG_DFL);
      std::signal(SIGINT, own_handler);  // Python's KeyboardInterrupt, caught by the program
      stop_signal::install();
      stop_signal::clear();
      stop_signal::mark_asked(false);
      std::raise(SIGINT);
      stop_signal::mark_asked(true);
      std::raise(SIGINT);  // a stop request now, not "the second Ctrl-C"
      ::_exit(g_own_handler_ran && stop_signal::pending() ? 0 : 1);
    }
    int status = 0;
    ::waitpid(pid, &status, 0);
    CHECK((WIFEXITED(status) && WEXITSTATUS(status) == 0));
  }

  TEST_CASE("after it asks the first SIGTERM is a request and the second ends it") {
    const int once = child_status(true, SIGTERM, 1);
    CHECK((WIFEXITED(once) && WEXITSTATUS(once) == 0));
    const int twice = child_status(true, SIGINT, 2);
    CHECK(WIFSIGNALED(twice));
    CHECK(WTERMSIG(twice) == SIGINT);
  }
}
