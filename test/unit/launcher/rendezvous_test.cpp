#include "dlrun/launcher/rendezvous.hpp"

#include <arpa/inet.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <poll.h>
#include <signal.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <future>
#include <thread>
#include <vector>

#include <doctest/doctest.h>

#include "dlrun/error.hpp"
#include "dlrun/launcher/ssh.hpp"

using namespace dlrun::launcher;

namespace {

// Lowers this process's soft descriptor limit for one test case, and puts it back.
class DescriptorLimit {
 public:
  explicit DescriptorLimit(rlim_t soft) {
    ::getrlimit(RLIMIT_NOFILE, &m_saved);
    rlimit lowered = m_saved;
    lowered.rlim_cur = soft;
    REQUIRE(::setrlimit(RLIMIT_NOFILE, &lowered) == 0);
  }
  ~DescriptorLimit() { ::setrlimit(RLIMIT_NOFILE, &m_saved); }
  const rlimit& saved() const { return m_saved; }

 private:
  rlimit m_saved{};
};

// `count` connections to 127.0.0.1:port that never send anything, held by a child process
// (its own descriptor table, its own limit) until this object goes.
class IdleConnections {
 public:
  IdleConnections() { REQUIRE(::pipe(m_ready) == 0); REQUIRE(::pipe(m_hold) == 0); }
  void open(int port, int count, const rlimit& limit) {
    m_child = ::fork();
    REQUIRE(m_child >= 0);
    if (m_child == 0) {
      ::close(m_hold[1]);  // the parent's end: its closing lets the child go
      ::setrlimit(RLIMIT_NOFILE, &limit);
      sockaddr_in addr{};
      addr.sin_family = AF_INET;
      addr.sin_port = htons(static_cast<uint16_t>(port));
      addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
      for (int i = 0; i < count; ++i) {
        int fd = ::socket(AF_INET, SOCK_STREAM | SOCK_NONBLOCK, 0);
        ::connect(fd, reinterpret_cast<sockaddr*>(&addr), sizeof addr);  // may stay in progress
      }
      char c = 'r';
      (void)!::write(m_ready[1], &c, 1);
      while (::read(m_hold[0], &c, 1) > 0) {
      }
      ::_exit(0);
    }
    ::close(m_hold[0]);
    m_hold[0] = -1;
    char c;
    REQUIRE(::read(m_ready[0], &c, 1) == 1);
  }
  ~IdleConnections() {
    for (int fd : {m_ready[0], m_ready[1], m_hold[0], m_hold[1]}) {
      if (fd >= 0) ::close(fd);
    }
    if (m_child > 0) ::waitpid(m_child, nullptr, 0);
  }

 private:
  int m_ready[2] = {-1, -1};
  int m_hold[2] = {-1, -1};
  pid_t m_child = -1;
};

double cpu_seconds() {
  timespec t{};
  ::clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &t);
  return static_cast<double>(t.tv_sec) + static_cast<double>(t.tv_nsec) / 1e9;
}

double wall_seconds() {
  using namespace std::chrono;
  return duration<double>(steady_clock::now().time_since_epoch()).count();
}

// Connects and joins as node 0 of round 0 with `secret`, on a thread; the future holds the
// node rank, or -1 when the join failed.
std::future<int> join_async(int port, const std::string& secret) {
  return std::async(std::launch::async, [port, secret] {
    try {
      RendezvousClient client;
      client.connect("127.0.0.1", port, 5);
      return client.join({secret, 0, 0, "127.0.0.1", 1}, 30).node_rank;
    } catch (const dlrun::Error&) {
      return -1;
    }
  });
}

// A blocking connection to 127.0.0.1:port.
int raw_connection(int port) {
  int fd = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_port = htons(static_cast<uint16_t>(port));
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  REQUIRE(::connect(fd, reinterpret_cast<sockaddr*>(&addr), sizeof addr) == 0);
  return fd;
}

// What the server sends on `fd` until it closes it; "(still open)" after `timeout_seconds`.
std::string read_until_closed(int fd, double timeout_seconds) {
  std::string text;
  double deadline = wall_seconds() + timeout_seconds;
  while (wall_seconds() < deadline) {
    pollfd p{fd, POLLIN, 0};
    if (::poll(&p, 1, 100) <= 0) continue;
    char chunk[256];
    ssize_t n = ::recv(fd, chunk, sizeof chunk, 0);
    if (n <= 0) return text;
    text.append(chunk, static_cast<size_t>(n));
  }
  return text + "(still open)";
}

}  // namespace

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
    Assignment a{1, 4, 8, 2, "10.0.0.1", 41000, {}};
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

  TEST_CASE("agents with the secret get node ranks, others are refused") {
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

  TEST_CASE("a connection that sends no join line is closed after the first-line limit") {
    RendezvousLimits limits;
    limits.first_line_seconds = 0.5;
    RendezvousServer server("s", {1}, {"a"}, 120, limits);
    server.start("127.0.0.1", 0);
    int silent = raw_connection(server.port());
    CHECK(read_until_closed(silent, 60) == "BUSY no join line within 0.5 s\n");
    ::close(silent);
    auto joined = join_async(server.port(), "s");
    CHECK(joined.get() == 0);
  }

  TEST_CASE("a newcomer beyond the limit closes the oldest connection that has not joined") {
    RendezvousLimits limits;
    limits.max_pending = 4;
    RendezvousServer server("s", {1}, {"a"}, 120, limits);
    server.start("127.0.0.1", 0);
    std::vector<int> idle;
    for (int i = 0; i < 5; ++i) idle.push_back(raw_connection(server.port()));
    CHECK(read_until_closed(idle[0], 60) == "BUSY more than 4 connections waiting to join\n");
    auto joined = join_async(server.port(), "s");  // the newest pushes out the next oldest
    CHECK(joined.get() == 0);
    CHECK(read_until_closed(idle[1], 60) == "BUSY more than 4 connections waiting to join\n");
    for (int fd : idle) ::close(fd);
  }

  TEST_CASE("an agent told BUSY joins again on a new connection, REFUSED is final") {
    // A stand-in launcher: the first connection hears BUSY (its place went to a newcomer),
    // the second gets the assignment, the third is refused.
    int listener = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    sockaddr_in addr{};
    addr.sin_family = AF_INET;
    addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    REQUIRE(::bind(listener, reinterpret_cast<sockaddr*>(&addr), sizeof addr) == 0);
    REQUIRE(::listen(listener, 8) == 0);
    socklen_t len = sizeof addr;
    ::getsockname(listener, reinterpret_cast<sockaddr*>(&addr), &len);
    const int port = ntohs(addr.sin_port);
    std::vector<std::string> lines;
    std::thread launcher([&] {
      const std::vector<std::string> replies = {
          "BUSY more than 1 connections waiting to join\n",
          format_assignment(Assignment{0, 0, 1, 1, "127.0.0.1", 4242, ""}),
          "REFUSED wrong job secret\n"};
      for (const std::string& reply : replies) {
        int fd = ::accept(listener, nullptr, nullptr);
        std::string line;
        for (char c; line.find('\n') == std::string::npos && ::recv(fd, &c, 1, 0) == 1;) line += c;
        lines.push_back(line);
        (void)!::send(fd, reply.data(), reply.size(), MSG_NOSIGNAL);
        ::close(fd);
      }
    });
    RendezvousClient agent;
    agent.connect("127.0.0.1", port, 5);
    const Assignment a = agent.join({"s", 0, 0, "127.0.0.1", 1}, 30);
    CHECK(a.master_port == 4242);
    RendezvousClient intruder;
    intruder.connect("127.0.0.1", port, 5);
    CHECK_THROWS_WITH_AS(intruder.join({"guess", 0, 0, "127.0.0.1", 1}, 30),
                         "the launcher's rendezvous refused this agent: wrong job secret", dlrun::ConfigError);
    launcher.join();
    ::close(listener);
    REQUIRE(lines.size() == 3);
    CHECK(lines[0] == format_join({"s", 0, 0, "127.0.0.1", 1}));
    CHECK(lines[1] == lines[0]);  // the same join, again
  }

  TEST_CASE("a join line longer than the limit is refused") {
    RendezvousServer server("s", {1}, {"a"}, 120);
    server.start("127.0.0.1", 0);
    int fd = raw_connection(server.port());
    std::string garbage(2000, 'x');
    REQUIRE(::send(fd, garbage.data(), garbage.size(), MSG_NOSIGNAL) == 2000);
    CHECK(read_until_closed(fd, 60) == "REFUSED a join line longer than 512 bytes\n");
    ::close(fd);
  }

  TEST_CASE("an agent joins behind hundreds of idle connections at a low descriptor limit") {
    // Before connections that never join were bounded, these took every descriptor.
    DescriptorLimit limit(64);
    RendezvousServer server("s", {1}, {"a"}, 120);
    server.start("127.0.0.1", 0);
    {
      IdleConnections idle;
      idle.open(server.port(), 300, limit.saved());
      auto joined = join_async(server.port(), "s");
      bool in_time = joined.wait_for(std::chrono::seconds(60)) == std::future_status::ready;
      CHECK(in_time);
      server.stop();  // ends a join that still waits
      CHECK(joined.get() == 0);
    }
  }

  TEST_CASE("a full descriptor table does not make the server spin, and it recovers") {
    DescriptorLimit limit(128);
    RendezvousServer server("s", {1}, {"a"}, 120);
    server.start("127.0.0.1", 0);
    IdleConnections idle;
    std::vector<int> filler;
    for (int fd; (fd = ::open("/dev/null", O_RDONLY | O_CLOEXEC)) >= 0;) filler.push_back(fd);
    idle.open(server.port(), 20, limit.saved());  // accept now fails with EMFILE
    double cpu = cpu_seconds();
    double wall = wall_seconds();
    std::this_thread::sleep_for(std::chrono::seconds(2));  // a window to measure, not a wait
    cpu = cpu_seconds() - cpu;
    wall = wall_seconds() - wall;
    for (int fd : filler) ::close(fd);
    CHECK_MESSAGE(cpu < 0.25 * wall, "the server used ", cpu, " s of CPU in ", wall, " s");
    auto joined = join_async(server.port(), "s");
    bool in_time = joined.wait_for(std::chrono::seconds(60)) == std::future_status::ready;
    CHECK(in_time);
    server.stop();
    CHECK(joined.get() == 0);
  }

  TEST_CASE("shell quoting for the remote command") {
    CHECK(shell_quote("plain-word_1.2") == "plain-word_1.2");
    CHECK(shell_quote("two words") == "'two words'");
    CHECK(shell_quote("it's") == "'it'\\''s'");
    CHECK(shell_quote("$HOME") == "'$HOME'");
    CHECK(shell_quote("") == "''");
  }
}
