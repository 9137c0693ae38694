#include "port_probe.hpp"

#include <doctest/doctest.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <chrono>
#include <thread>

using dlrun::runtime::wait_until_listening;

namespace {

// A socket bound to a free loopback port; listen() only when asked.
struct Port {
  int fd = ::socket(AF_INET, SOCK_STREAM, 0);
  uint16_t number = 0;
  Port() {
    sockaddr_in address{};
    address.sin_family = AF_INET;
    address.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    ::bind(fd, reinterpret_cast<sockaddr*>(&address), sizeof(address));
    socklen_t size = sizeof(address);
    ::getsockname(fd, reinterpret_cast<sockaddr*>(&address), &size);
    number = ntohs(address.sin_port);
  }
  ~Port() { ::close(fd); }
  void listen() { ::listen(fd, 4); }
};

}  // namespace

TEST_SUITE("runtime::PortProbe") {
  TEST_CASE("a listening port is found at once") {
    Port port;
    port.listen();
    const auto start = std::chrono::steady_clock::now();
    CHECK(wait_until_listening("127.0.0.1", port.number, std::chrono::seconds(5)));
    CHECK(std::chrono::steady_clock::now() - start < std::chrono::seconds(2));
  }

  TEST_CASE("a port that starts listening later is found soon after, not a second later") {
    Port port;
    const auto start = std::chrono::steady_clock::now();
    std::chrono::steady_clock::time_point listening;
    std::thread later([&] {
      std::this_thread::sleep_for(std::chrono::milliseconds(100));
      port.listen();
      listening = std::chrono::steady_clock::now();
    });
    CHECK(wait_until_listening("127.0.0.1", port.number, std::chrono::seconds(30)));
    const auto found = std::chrono::steady_clock::now();
    later.join();
    CHECK(found - start >= std::chrono::milliseconds(100));  // not before it listened
    // Found within a retry interval of listening; TCPStore's own retry would take 1 s.
    CHECK(found - listening < std::chrono::milliseconds(900));
  }

  TEST_CASE("a port nobody listens on gives up at the deadline") {
    Port port;  // bound, never listening: connections are refused
    CHECK_FALSE(wait_until_listening("127.0.0.1", port.number, std::chrono::milliseconds(100)));
    CHECK_FALSE(wait_until_listening("no-such-host.invalid", 1, std::chrono::milliseconds(50)));
  }
}
