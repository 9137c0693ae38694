#include "dlrun/launcher/machine_share.hpp"

#include <doctest/doctest.h>

using namespace dlrun::launcher;

TEST_SUITE("launcher::MachineShare") {
  TEST_CASE("with no one waiting elsewhere, this store may use what other stores' jobs do not hold") {
    CHECK(capacity_beside_others({8, 0, 1, 1, {}}) == 8);
    CHECK(capacity_beside_others({8, 3, 1, 2, {}}) == 5);
  }
  TEST_CASE("another user's waiting job gets room, down to this store's fair share") {
    // One elastic job holds all 8 GPUs; another user's job waits for 1: room for it.
    CHECK(capacity_beside_others({8, 0, 1, 2, {{1, false}}}) == 7);
    // Waiting for 6: this store would keep less than its share (4): no room, which would stay idle.
    CHECK(capacity_beside_others({8, 0, 1, 2, {{6, false}}}) == 8);
    // ... until that job has waited past starvation_seconds: down to what cannot be given back.
    CHECK(capacity_beside_others({8, 0, 1, 2, {{6, true}}}) == 2);
    CHECK(capacity_beside_others({8, 0, 3, 2, {{6, true}}}) == 8);  // 3 cannot be given back
    // Oldest first; one whose MIN cannot be met is passed over for a smaller one after it.
    CHECK(capacity_beside_others({8, 0, 1, 2, {{6, false}, {1, false}}}) == 7);
    // Three stores: this one keeps its share of 2.
    CHECK(capacity_beside_others({8, 0, 1, 3, {{4, false}, {2, false}}}) == 2);
    CHECK(capacity_beside_others({8, 0, 1, 3, {{1, false}, {2, false}}}) == 5);
  }
}
