#include "dlrun/launcher/host_list.hpp"

#include <doctest/doctest.h>

#include "dlrun/error.hpp"

using namespace dlrun::launcher;

TEST_SUITE("launcher::HostList") {
  TEST_CASE("hosts with slots, slots default to 1") {
    auto hosts = parse_host_list("a:4,user@b:2,c");
    REQUIRE(hosts.size() == 3);
    CHECK(hosts[0].name == "a");
    CHECK(hosts[0].slots == 4);
    CHECK(hosts[1].name == "user@b");
    CHECK(hosts[1].slots == 2);
    CHECK(hosts[2].slots == 1);
  }
  TEST_CASE("bad host lists name the bad entry") {
    CHECK_THROWS_WITH_AS(parse_host_list("a:0"), "--hosts a:0: 'a:0': slots must be a number of ranks, at least 1 (as in a:4)",
                         dlrun::ConfigError);
    CHECK_THROWS_WITH_AS(parse_host_list("a:2,a:2"), "--hosts a:2,a:2: host 'a' is listed twice; give it once with all its slots",
                         dlrun::ConfigError);
    CHECK_THROWS_AS(parse_host_list("a:x"), dlrun::ConfigError);
    CHECK_THROWS_AS(parse_host_list(""), dlrun::ConfigError);
    CHECK_THROWS_AS(parse_host_list("a b:2"), dlrun::ConfigError);
  }
  TEST_CASE("one machine named twice in another case is a duplicate, and IPv6 is only this machine's ::1") {
    CHECK_THROWS_WITH_AS(parse_host_list("node1:2,NODE1:2"),
                         "--hosts node1:2,NODE1:2: host 'NODE1' is listed twice; give it once with all its slots",
                         dlrun::ConfigError);
    CHECK(parse_host_list("alice@node1,bob@node1").size() == 2);  // two logins
    CHECK(parse_host_list("[::1]")[0].name == "::1");
    CHECK((parse_host_list("::1")[0].name == "::1" && parse_host_list("::1")[0].slots == 1));
    CHECK_THROWS_WITH_AS(parse_host_list("fe80::"),
                         "--hosts fe80::: 'fe80::': IPv6 addresses other than ::1 are not supported: give the host by "
                         "name or by IPv4 address (this machine with N slots: [::1]:N)",
                         dlrun::ConfigError);
    CHECK_THROWS_WITH_AS(parse_host_list("cafe:2:4"),  // not an IPv6 address: a bad slot count
                         "--hosts cafe:2:4: 'cafe:2:4' is not a host name (expected HOST or HOST:SLOTS, comma-separated)",
                         dlrun::ConfigError);
    CHECK_THROWS_WITH_AS(parse_host_list("[fe80::1]:2"),
                         "--hosts [fe80::1]:2: '[fe80::1]:2': IPv6 addresses other than ::1 are not supported: give "
                         "the host by name or by IPv4 address (this machine with N slots: [::1]:N)",
                         dlrun::ConfigError);
    CHECK_THROWS_AS(parse_host_list("[::1]x"), dlrun::ConfigError);
    CHECK_THROWS_AS(parse_host_list("[::1]:0"), dlrun::ConfigError);
    auto hosts = parse_hostfile("::1 slots=2\n", "hosts");
    CHECK((hosts[0].name == "::1" && hosts[0].slots == 2));
    CHECK(parse_hostfile("[::1] slots=2\n", "hosts")[0].name == "::1");
    CHECK_THROWS_WITH_AS(parse_hostfile("2001:db8::7 slots=2\n", "hosts"),
                         "hosts:1: '2001:db8::7': IPv6 addresses other than ::1 are not supported: give the host by "
                         "name or by IPv4 address (this machine with N slots: [::1]:N)",
                         dlrun::ConfigError);
    CHECK_THROWS_WITH_AS(parse_host_list("me@[::1]"),
                         "--hosts me@[::1]: 'me@[::1]': a user@ entry logs in over ssh, and the ranks' rendezvous "
                         "speaks IPv4: write user@localhost",
                         dlrun::ConfigError);
  }
  TEST_CASE("hostfiles in the Open MPI / DeepSpeed format") {
    auto hosts = parse_hostfile("# cluster\nworker-1 slots=8\n\nworker-2 slots=4 max_slots=4  # big\nworker-3\n", "hosts");
    REQUIRE(hosts.size() == 3);
    CHECK(hosts[0].name == "worker-1");
    CHECK(hosts[0].slots == 8);
    CHECK(hosts[1].slots == 4);
    CHECK(hosts[2].slots == 1);
    // Any white space between the words, and Open MPI's spelling max-slots.
    hosts = parse_hostfile("worker-1\tslots=2 max-slots=4\r\n", "hosts");
    REQUIRE(hosts.size() == 1);
    CHECK(hosts[0].name == "worker-1");
    CHECK(hosts[0].slots == 2);
  }
  TEST_CASE("hostfile errors carry the line") {
    CHECK_THROWS_WITH_AS(parse_hostfile("a slots=2\nb slots=zero\n", "hosts"), "hosts:2: 'slots=zero': slots must be a whole number from 1 to 2147483647",
                         dlrun::ConfigError);
    CHECK_THROWS_WITH_AS(parse_hostfile("a cpus=2\n", "hosts"), "hosts:1: unknown word 'cpus=2' (expected: HOST slots=N)",
                         dlrun::ConfigError);
    CHECK_THROWS_WITH_AS(parse_hostfile("# nothing\n", "hosts"), "hosts: no hosts given", dlrun::ConfigError);
    CHECK_THROWS_WITH_AS(parse_hostfile("a slots=2\nb\n\nA slots=1\n", "hosts"),
                         "hosts:4: host 'A' is listed twice; give it once with all its slots", dlrun::ConfigError);
  }
  TEST_CASE("local names run without ssh") {
    auto hosts = parse_host_list("localhost:2,127.0.0.1,me,10.0.0.5,other");
    mark_local_hosts(hosts, {"me", "10.0.0.5"});
    CHECK(hosts[0].local);
    CHECK(hosts[1].local);
    CHECK(hosts[2].local);
    CHECK(hosts[3].local);
    CHECK_FALSE(hosts[4].local);
    CHECK(host_part("user@node") == "node");
    hosts = parse_host_list("LOCALHOST:2,Me,[::1]:3,10.0.0.5");  // names in any case
    mark_local_hosts(hosts, {"me", "10.0.0.5"});
    CHECK((hosts[0].local && hosts[1].local && hosts[2].local && hosts[3].local));
    CHECK(hosts[2].name == "::1");
    CHECK(hosts[2].slots == 3);
    hosts = parse_host_list("node1");
    mark_local_hosts(hosts, {"NODE1"});
    CHECK(hosts[0].local);
    hosts = parse_host_list("nobody@localhost,nobody@me");  // as that user: over ssh
    mark_local_hosts(hosts, {"me"});
    CHECK_FALSE(hosts[0].local);
    CHECK_FALSE(hosts[1].local);
  }
}
