#include "dlrun/launcher/scheduler_loop.hpp"

#include <doctest/doctest.h>

using namespace dlrun::launcher;

TEST_SUITE("launcher::scheduler_loop") {
  TEST_CASE("a decision becomes shrinks, then starts of the scheduler's own waiting jobs, then grows") {
    std::vector<PolicyJob> jobs(5);
    jobs[0].current = 4;  // shrinks to 2
    jobs[1].current = 0;  // starts with 2
    jobs[2].current = 0;  // a fifo job given room: it starts itself
    jobs[3].current = 1;  // grows to 3
    jobs[4].current = 2;  // stays
    PolicyDecision decision;
    decision.gpus = {2, 2, 1, 3, 2};
    auto plan = plan_moves(jobs, decision, {true, true, false, true, true});
    REQUIRE(plan.shrinks.size() == 1);
    CHECK((plan.shrinks[0].job == 0 && plan.shrinks[0].from == 4 && plan.shrinks[0].to == 2));
    REQUIRE(plan.starts.size() == 1);
    CHECK((plan.starts[0].job == 1 && plan.starts[0].to == 2));
    REQUIRE(plan.grows.size() == 1);
    CHECK((plan.grows[0].job == 3 && plan.grows[0].from == 1 && plan.grows[0].to == 3));
    decision.gpus = {4, 0, 0, 1, 2};
    CHECK(plan_moves(jobs, decision, {true, true, false, true, true}).empty());
  }
}
