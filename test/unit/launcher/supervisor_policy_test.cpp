#include "dlrun/launcher/supervisor_policy.hpp"

#include <doctest/doctest.h>

#include "dlrun/protocol.hpp"

using namespace dlrun::launcher;

TEST_SUITE("launcher::SupervisorPolicy") {
  TEST_CASE("a stop signal ends the job with 128 + signal, whatever else happened") {
    AttemptEnd end;
    end.stop_signal = 15;
    end.failure_code = 7;
    end.resize_pending = true;
    end.max_restarts = 3;
    const Decision d = decide_after_attempt(end);
    CHECK(d.step == NextStep::finish);
    CHECK(d.exit_code == 143);
    CHECK(d.stopped);
  }

  TEST_CASE("a failure restarts while the budget lasts, then ends the job with its code") {
    AttemptEnd end;
    end.failure_code = 7;
    end.max_restarts = 2;
    end.failures_restarted = 1;
    CHECK(decide_after_attempt(end).step == NextStep::restart_after_failure);
    end.failures_restarted = 2;
    const Decision d = decide_after_attempt(end);
    CHECK(d.step == NextStep::finish);
    CHECK(d.exit_code == 7);
    CHECK(d.budget_spent);
    end.max_restarts = end.failures_restarted = 0;
    CHECK_FALSE(decide_after_attempt(end).budget_spent);  // there never was one
  }

  TEST_CASE("a restart request restarts without a budget, success ends the job with 0") {
    AttemptEnd end;
    end.restart_requested = true;
    CHECK(decide_after_attempt(end).step == NextStep::restart_on_request);
    end.restart_requested = false;
    end.all_succeeded = true;
    CHECK(decide_after_attempt(end).step == NextStep::finish);
    CHECK(decide_after_attempt(end).exit_code == 0);
  }

  TEST_CASE("a resize goes before a failure, unless the ranks had finished their work") {
    AttemptEnd end;
    end.resize_pending = true;
    end.restart_requested = true;
    CHECK(decide_after_attempt(end).step == NextStep::resize);
    end.restart_requested = false;
    end.failure_code = 137;  // killed after the grace period
    CHECK(decide_after_attempt(end).step == NextStep::resize);
    end.failure_code.reset();
    end.all_succeeded = true;
    CHECK(decide_after_attempt(end).step == NextStep::finished_before_resize);
  }

  TEST_CASE("a late signal keeps the attempt's own outcome and starts nothing again") {
    AttemptEnd end;
    end.late_signal = 2;
    end.failure_code = 5;
    end.max_restarts = 3;  // a restart was left: the signal said stop
    Decision d = decide_after_attempt(end);
    CHECK(d.step == NextStep::finish);
    CHECK(d.exit_code == 5);
    CHECK_FALSE(d.stopped);
    end.failure_code.reset();
    end.all_succeeded = true;
    d = decide_after_attempt(end);
    CHECK(d.step == NextStep::finish);
    CHECK(d.exit_code == 0);
    CHECK_FALSE(d.stopped);
    end.all_succeeded = false;
    end.restart_requested = true;  // the ranks asked to be restarted, the signal to stop: stopped
    d = decide_after_attempt(end);
    CHECK(d.step == NextStep::finish);
    CHECK(d.exit_code == 130);
    CHECK(d.stopped);
    end.restart_requested = false;
    end.resize_pending = true;
    CHECK(decide_after_attempt(end).exit_code == 130);
  }

  TEST_CASE("restarts asked for right after the start wait longer and longer, up to 30 s") {
    using std::chrono::milliseconds;
    for (int n : {0, 1, 2, 3}) CHECK(restart_request_delay(n) == milliseconds(0));
    CHECK(restart_request_delay(4) == milliseconds(1000));
    CHECK(restart_request_delay(5) == milliseconds(2000));
    CHECK(restart_request_delay(8) == milliseconds(16000));
    CHECK(restart_request_delay(9) == milliseconds(30000));
    CHECK(restart_request_delay(100000) == milliseconds(30000));
  }

  TEST_CASE("a rank waits when it used at most 2% of a core over the time looked at") {
    CHECK(waits_idle(0.0, 60));
    CHECK(waits_idle(1.2, 60));
    CHECK_FALSE(waits_idle(1.3, 60));
    CHECK_FALSE(waits_idle(0.0, 0));
  }

  TEST_CASE("the tenth quick restart request in a row is a loop, which ends the job") {
    for (int n : {0, 1, 4, 9}) CHECK_FALSE(restart_requests_loop(n));
    CHECK(restart_requests_loop(10));
  }

  TEST_CASE("a GPU is left out after two failures in a row on it, never below the minimum") {
    GpuFailures failures;
    CHECK_FALSE(failures.count("1", 4, 1));
    CHECK_FALSE(failures.count("2", 4, 1));  // another GPU: the count starts again
    CHECK(failures.count("2", 4, 1));
    CHECK_FALSE(failures.count("2", 3, 1));  // counted again from zero after leaving one out
    CHECK_FALSE(failures.count("3", 2, 2));
    CHECK_FALSE(failures.count("3", 2, 2));  // 2 ranks, minimum 2: nothing can be left out
  }
}
