#include "dlrun/launcher/rendezvous.hpp"

#include <signal.h>

#include <atomic>
#include <thread>

#include <doctest/doctest.h>

#include "dlrun/error.hpp"
#include "dlrun/launcher/ssh.hpp"

using namespace dlrun::launcher;

TEST_SUITE("launcher::Rendezvous") {
  TEST_CASE("join and assignment lines round-trip") {
    JoinRequest j{"abc", 2, 1, "10.0.0.2", 29500};
    auto back = parse_join(format_join(j).substr(0, format_join(j).size() - 1));
    REQUIRE(back);
    CHECK(back->secret == "abc");
    CHECK(back->round == 2);
    CHECK(back->node == 1);
    CHECK(back->address == "10.0.0.2");
    CHECK(back->port == 29500);
    CHECK_FALSE(parse_join("JOIN abc 2"));
    CHECK_FALSE(parse_join("HELLO"));
    Assignment a{1, 4, 8, 2, "10.0.0.1", 41000};
    auto b = parse_assignment(format_assignment(a));
    REQUIRE(b);
    CHECK(b->first_rank == 4);
    CHECK(b->master_addr == "10.0.0.1");
    CHECK(b->plan.empty());
    // The plan is the rest of the line, spaces and all.
    a.plan = R"({"command":["python3","my train.py"]})";
    b = parse_assignment(format_assignment(a).substr(0, format_assignment(a).size() - 1));
    REQUIRE(b);
    CHECK(b->master_port == 41000);
    CHECK(b->plan == a.plan);
  }

  TEST_CASE("agents with the secret get node ranks; others are refused") {
    RendezvousServer server("s3cret", {2, 1}, {"a", "b"}, 30);
    std::atomic<int> refused{0};
    server.on_refused([&](const std::string&) { ++refused; });
    server.start("127.0.0.1", 0);

    RendezvousClient intruder;
    intruder.connect("127.0.0.1", server.port(), 5);
    CHECK_THROWS_WITH_AS(intruder.join({"guess", 0, 0, "127.0.0.1", 1}, 5),
                         "the launcher's rendezvous refused this agent: wrong job secret", dlrun::ConfigError);

    Assignment second;
    std::thread late([&] {
      RendezvousClient client;
      client.connect("127.0.0.1", server.port(), 5);
      second = client.join({"s3cret", 0, 1, "127.0.0.1", 0}, 10);
    });
    RendezvousClient first;
    first.connect("127.0.0.1", server.port(), 5);
    Assignment a = first.join({"s3cret", 0, 0, "127.0.0.7", 4242}, 10);
    late.join();
    CHECK(a.node_rank == 0);
    CHECK(a.first_rank == 0);
    CHECK(a.world_size == 3);
    CHECK(a.num_nodes == 2);
    CHECK(second.node_rank == 1);
    CHECK(second.first_rank == 2);
    CHECK(second.master_addr == "127.0.0.7");  // node 0's address and port
    CHECK(second.master_port == 4242);
    CHECK(refused == 1);
    server.stop();
  }

  TEST_CASE("a round that does not fill up names the missing hosts") {
    // The round's time limit starts with the server: it must leave node 0 ample time to join
    // on a busy machine, or node 0 is named missing too.
    RendezvousServer server("s", {1, 1}, {"a", "b"}, 3);
    std::atomic<bool> failed{false};
    std::string reason;
    server.on_failure([&](const std::string& r) {
      reason = r;
      failed = true;
    });
    server.start("127.0.0.1", 0);
    RendezvousClient client;
    client.connect("127.0.0.1", server.port(), 5);
    std::thread joiner([&] {
      try {
        client.join({"s", 0, 0, "127.0.0.1", 1}, 60);
      } catch (const dlrun::Error&) {
      }
    });
    for (int i = 0; i < 3000 && !failed; ++i) std::this_thread::sleep_for(std::chrono::milliseconds(20));
    server.stop();
    joiner.join();
    REQUIRE(failed);
    CHECK(reason == "not every host joined the rendezvous within 3 s; missing: b (node 1)");
  }

  TEST_CASE("shell quoting for the remote command") {
    CHECK(shell_quote("plain-word_1.2") == "plain-word_1.2");
    CHECK(shell_quote("two words") == "'two words'");
    CHECK(shell_quote("it's") == "'it'\\''s'");
    CHECK(shell_quote("$HOME") == "'$HOME'");
    CHECK(shell_quote("") == "''");
  }
}
