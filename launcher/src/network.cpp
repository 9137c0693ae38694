#include "dlrun/launcher/network.hpp"

#include <arpa/inet.h>
#include <ifaddrs.h>
#include <net/if.h>
#include <netdb.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cstring>
#include <fstream>

#include <fmt/format.h>

#include "dlrun/error.hpp"
#include "dlrun/launcher/host_list.hpp"

namespace dlrun::launcher {
namespace {

std::string text_of(const sockaddr_in& addr) {
  char text[INET_ADDRSTRLEN] = "";
  ::inet_ntop(AF_INET, &addr.sin_addr, text, sizeof text);
  return text;
}

template <typename F>
void for_each_ipv4(F&& f) {
  ifaddrs* list = nullptr;
  if (::getifaddrs(&list) != 0) return;
  for (ifaddrs* i = list; i; i = i->ifa_next) {
    if (i->ifa_addr && i->ifa_addr->sa_family == AF_INET) {
      f(std::string(i->ifa_name), text_of(*reinterpret_cast<sockaddr_in*>(i->ifa_addr)));
    }
  }
  ::freeifaddrs(list);
}

}  // namespace

std::string route_source_address(const std::string& host) {
  addrinfo hints{};
  hints.ai_family = AF_INET;
  hints.ai_socktype = SOCK_DGRAM;
  addrinfo* result = nullptr;
  std::string name = host_part(host);
  if (int rc = ::getaddrinfo(name.c_str(), "9", &hints, &result); rc != 0) {
    throw ConfigError(fmt::format("host {}: cannot resolve {}: {}", host, name, ::gai_strerror(rc)));
  }
  int fd = ::socket(AF_INET, SOCK_DGRAM | SOCK_CLOEXEC, 0);
  std::string address = "127.0.0.1";
  // A UDP connect sends nothing; it only asks the kernel for a route.
  if (fd >= 0 && ::connect(fd, result->ai_addr, result->ai_addrlen) == 0) {
    sockaddr_in local{};
    socklen_t len = sizeof local;
    ::getsockname(fd, reinterpret_cast<sockaddr*>(&local), &len);
    address = text_of(local);
  }
  if (fd >= 0) ::close(fd);
  ::freeaddrinfo(result);
  return address;
}

std::string interface_address(const std::string& name) {
  std::string found, all;
  for_each_ipv4([&](const std::string& iface, const std::string& address) {
    if (iface == name && found.empty()) found = address;
    all += (all.empty() ? "" : ", ") + iface;
  });
  if (found.empty()) throw ConfigError(fmt::format("--iface {}: no such interface with an IPv4 address (there are: {})", name, all));
  return found;
}

std::string interface_of_address(const std::string& address) {
  std::string found;
  for_each_ipv4([&](const std::string& iface, const std::string& a) {
    if (a == address && found.empty()) found = iface;
  });
  return found;
}

std::vector<std::string> own_names() {
  std::vector<std::string> names;
  char host[256] = {};
  if (::gethostname(host, sizeof host - 1) == 0) names.emplace_back(host);
  for_each_ipv4([&](const std::string&, const std::string& address) { names.push_back(address); });
  return names;
}

std::string random_secret() {
  std::ifstream urandom("/dev/urandom", std::ios::binary);
  unsigned char bytes[16] = {};
  urandom.read(reinterpret_cast<char*>(bytes), sizeof bytes);
  std::string hex;
  for (unsigned char b : bytes) hex += fmt::format("{:02x}", b);
  return hex;
}

}  // namespace dlrun::launcher
