#include "dlrun/launcher/rendezvous_admission.hpp"

#include <doctest/doctest.h>

using namespace dlrun::launcher;

TEST_SUITE("launcher::RendezvousAdmission") {
  TEST_CASE("the pending limit leaves three quarters of the descriptors to the job") {
    CHECK(pending_limit(64, 1024) == 64);
    CHECK(pending_limit(64, 64) == 16);
    CHECK(pending_limit(64, 100) == 25);
    CHECK(pending_limit(64, 3) == 1);
    CHECK(pending_limit(0, 1024) == 1);
  }

  TEST_CASE("secrets compare equal only when they are the same") {
    CHECK(secrets_equal("0123456789abcdef", "0123456789abcdef"));
    CHECK_FALSE(secrets_equal("0123456789abcdef", "0123456789abcdeF"));
    CHECK_FALSE(secrets_equal("0123456789abcdef", "1123456789abcdef"));
    CHECK_FALSE(secrets_equal("0123456789abcdef", "0123456789abcde"));    // a prefix
    CHECK_FALSE(secrets_equal("0123456789abcdef", "0123456789abcdef0"));  // longer
    CHECK_FALSE(secrets_equal("abc", "abcabc"));                          // a repetition
    CHECK_FALSE(secrets_equal("abc", ""));
    CHECK_FALSE(secrets_equal("", ""));  // an empty secret admits nobody
  }

  TEST_CASE("a newcomer beyond the limit closes the oldest waiting connection") {
    PendingConnections pending(3, 10);
    CHECK_FALSE(pending.admit(5, 0.0));
    CHECK_FALSE(pending.admit(6, 1.0));
    CHECK_FALSE(pending.admit(7, 2.0));
    CHECK(pending.admit(8, 3.0) == 5);
    CHECK(pending.size() == 3);
    CHECK_FALSE(pending.contains(5));
    pending.remove(6);  // joined
    CHECK_FALSE(pending.admit(9, 4.0));
    CHECK(pending.admit(10, 5.0) == 7);
    CHECK(pending.oldest() == 8);
    pending.remove(42);  // unknown: nothing happens
    CHECK(pending.size() == 3);
  }

  TEST_CASE("connections silent past the first-line limit expire, oldest first") {
    PendingConnections pending(10, 10);
    pending.admit(5, 0.0);
    pending.admit(6, 4.0);
    pending.admit(7, 8.0);
    CHECK(pending.expire(9.9).empty());
    CHECK(pending.expire(14.0) == std::vector<int>{5, 6});
    CHECK(pending.size() == 1);
    CHECK(pending.oldest() == 7);
    CHECK(pending.expire(100.0) == std::vector<int>{7});
    CHECK_FALSE(pending.oldest());
  }

  TEST_CASE("refusals: the first of each interval in full, the rest counted once") {
    RefusalLog log(2, 10);
    CHECK(log.admit(0.0));
    CHECK(log.admit(1.0));
    CHECK_FALSE(log.admit(2.0));
    CHECK_FALSE(log.admit(3.0));
    CHECK(log.take_unlogged(5.0) == 0);  // the interval is still open
    CHECK(log.take_unlogged(10.0) == 2);
    CHECK(log.take_unlogged(11.0) == 0);  // counted once
    CHECK(log.admit(12.0));               // a new interval logs again
    CHECK(log.admit(13.0));
    CHECK_FALSE(log.admit(14.0));
    // An event of the next interval comes before the count is taken: both are kept apart.
    CHECK(log.admit(23.0));
    CHECK(log.take_unlogged(23.5) == 1);
    CHECK(log.admit(24.0));
    CHECK_FALSE(log.admit(25.0));
    CHECK(log.take_unlogged(40.0) == 1);
  }

  TEST_CASE("the server listens where the hosts reach it") {
    CHECK(rendezvous_bind_address({"127.0.0.1"}) == "127.0.0.1");
    CHECK(rendezvous_bind_address({"127.0.0.1", "127.0.0.1"}) == "127.0.0.1");
    CHECK(rendezvous_bind_address({"10.0.0.1", "10.0.0.1", "10.0.0.1"}) == "10.0.0.1");
    CHECK(rendezvous_bind_address({"10.0.0.1", "192.168.1.5"}) == "0.0.0.0");
    CHECK(rendezvous_bind_address({}) == "0.0.0.0");
  }
  TEST_CASE("a host reached over loopback takes the outside address when other hosts come from outside") {
    using V = std::vector<std::string>;
    CHECK(contacts_all_can_reach({"127.0.0.1", "10.77.0.1"}) == V{"10.77.0.1", "10.77.0.1"});
    CHECK(contacts_all_can_reach({"10.0.0.1", "127.0.1.1", "192.168.1.5"}) == V{"10.0.0.1", "10.0.0.1", "192.168.1.5"});
    CHECK(contacts_all_can_reach({"127.0.0.1", "127.0.0.1"}) == V{"127.0.0.1", "127.0.0.1"});  // this machine alone
    CHECK(contacts_all_can_reach({"::1", "10.0.0.2"}) == V{"10.0.0.2", "10.0.0.2"});
    CHECK(contacts_all_can_reach({}).empty());
  }
}
