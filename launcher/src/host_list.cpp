#include "dlrun/launcher/host_list.hpp"

#include <arpa/inet.h>
#include <netinet/in.h>

#include <algorithm>
#include <limits>
#include <cctype>
#include <optional>
#include <utility>
#include <set>
#include <sstream>

#include <fmt/format.h>

#include "dlrun/error.hpp"
#include "dlrun/launcher/text.hpp"

namespace dlrun::launcher {
namespace {

// Host names are not case-sensitive (DNS): "node1" and "NODE1" are one machine.
std::string lower(std::string text) {
  std::transform(text.begin(), text.end(), text.begin(),
                 [](unsigned char c) { return static_cast<char>(std::tolower(c)); });
  return text;
}

// The name two entries that mean one machine (and one login) share.
std::string identity(const std::string& name) {
  const auto at = name.find('@');
  return at == std::string::npos ? lower(name) : name.substr(0, at + 1) + lower(name.substr(at + 1));
}

void check_unique(const std::vector<Host>& hosts, const std::string& where) {
  std::set<std::string> seen;
  for (const auto& h : hosts) {
    if (!seen.insert(identity(h.name)).second) {
      throw ConfigError(fmt::format("{}: host '{}' is listed twice; give it once with all its slots", where, h.name));
    }
  }
  if (hosts.empty()) throw ConfigError(fmt::format("{}: no hosts given", where));
}

bool is_loopback_ipv6(std::string_view address) { return address == "::1" || address == "0:0:0:0:0:0:0:1"; }

// An IPv6 address as inet_pton reads one (a typo such as "cafe:2:4" is not one).
bool looks_ipv6(std::string_view address) {
  in6_addr parsed{};
  return address.find(':') != std::string_view::npos &&
         ::inet_pton(AF_INET6, std::string(address).c_str(), &parsed) == 1;
}

// A host name, an IPv4 address, or ::1 (this machine's IPv6 loopback), after an optional user@.
// Other IPv6 addresses are refused by name: the ranks' rendezvous speaks IPv4.
bool valid_name(std::string_view name, std::string& why) {
  const auto at = name.find('@');
  const std::string_view host = at == std::string_view::npos ? name : name.substr(at + 1);
  if (looks_ipv6(host)) {
    if (is_loopback_ipv6(host) && at == std::string_view::npos) return true;
    why = is_loopback_ipv6(host)
              ? "a user@ entry logs in over ssh, and the ranks' rendezvous speaks IPv4: write user@localhost"
              : "IPv6 addresses other than ::1 are not supported: give the host by name or by IPv4 address "
                "(this machine with N slots: [::1]:N)";
    return false;
  }
  if (name.empty()) return false;
  return std::all_of(name.begin(), name.end(), [](char c) {
    return std::isalnum(static_cast<unsigned char>(c)) || c == '.' || c == '-' || c == '_' || c == '@';
  });
}

// "HOST", "HOST:SLOTS", "[::1]" or "[::1]:SLOTS" (an IPv6 address in brackets, as URLs write it);
// "::1" without brackets is a name without slots.
std::pair<std::string, std::optional<std::string>> split_entry(const std::string& entry) {
  const auto at = entry.find('@');
  const size_t open = at == std::string::npos ? 0 : at + 1;
  if (open < entry.size() && entry[open] == '[') {
    const auto close = entry.find(']', open);
    if (close != std::string::npos && (close + 1 == entry.size() || entry[close + 1] == ':')) {
      std::optional<std::string> slots;
      if (close + 1 < entry.size()) slots = entry.substr(close + 2);
      return {entry.substr(0, open) + entry.substr(open + 1, close - open - 1), slots};
    }
  }
  const auto colon = entry.rfind(':');
  if (colon == std::string::npos || looks_ipv6(entry.substr(open))) return {entry, std::nullopt};
  return {entry.substr(0, colon), entry.substr(colon + 1)};
}

}  // namespace

std::vector<Host> parse_host_list(std::string_view text) {
  std::vector<Host> hosts;
  for (const auto& raw : split(text, ',')) {
    auto entry = std::string(trim(raw));
    Host host;
    auto [name, slots_text] = split_entry(entry);
    host.name = name;
    if (slots_text) {
      auto slots = parse_int(*slots_text);
      if (!slots || *slots < 1) {
        throw ConfigError(fmt::format("--hosts {}: '{}': slots must be a number of ranks, at least 1 (as in a:4)", text, entry));
      }
      host.slots = *slots;
    }
    std::string why;
    if (!valid_name(host.name, why)) {
      throw ConfigError(why.empty() ? fmt::format("--hosts {}: '{}' is not a host name (expected HOST or HOST:SLOTS, "
                                                  "comma-separated)", text, entry)
                                    : fmt::format("--hosts {}: '{}': {}", text, entry, why));
    }
    hosts.push_back(host);
  }
  check_unique(hosts, fmt::format("--hosts {}", text));
  return hosts;
}

std::vector<Host> parse_hostfile(std::string_view text, const std::string& path) {
  std::vector<Host> hosts;
  int line_number = 0;
  for (const auto& raw : split(text, '\n')) {
    ++line_number;
    auto line = std::string(trim(raw.substr(0, raw.find('#'))));
    if (line.empty()) continue;
    std::vector<std::string> words;  // split on any white space, as Open MPI and DeepSpeed do
    std::istringstream stream(line);
    for (std::string w; stream >> w;) words.push_back(w);
    Host host;
    host.name = words[0];
    if (host.name.size() > 2 && host.name.front() == '[' && host.name.back() == ']') {
      host.name = host.name.substr(1, host.name.size() - 2);
    }
    std::string why;
    if (!valid_name(host.name, why)) {
      // HOST:N is --hosts' way; a hostfile says slots=N.
      const auto colon = host.name.rfind(':');
      const bool slots_after_colon = colon != std::string::npos && colon + 1 < host.name.size() &&
                                     host.name.find_first_not_of("0123456789", colon + 1) == std::string::npos &&
                                     host.name.find(':') == colon;
      const std::string hint =
          slots_after_colon ? fmt::format(" (a hostfile line is 'HOST slots=N': {} slots={})", host.name.substr(0, colon),
                                          host.name.substr(colon + 1))
                            : "";
      throw ConfigError(why.empty() ? fmt::format("{}:{}: '{}' is not a host name{}", path, line_number, host.name, hint)
                                    : fmt::format("{}:{}: '{}': {}{}", path, line_number, host.name, why, hint));
    }
    for (size_t i = 1; i < words.size(); ++i) {
      const auto& w = words[i];
      if (w.rfind("slots=", 0) == 0) {
        auto slots = parse_int(w.substr(6));
        if (!slots || *slots < 1) {
          throw ConfigError(fmt::format("{}:{}: '{}': slots must be a whole number from 1 to {}", path, line_number, w,
                                        std::numeric_limits<int>::max()));
        }
        host.slots = *slots;
      } else if (w.rfind("max_slots=", 0) != 0 && w.rfind("max-slots=", 0) != 0) {
        throw ConfigError(fmt::format("{}:{}: unknown word '{}' (expected: HOST slots=N)", path, line_number, w));
      }
    }
    hosts.push_back(host);
    check_unique(hosts, fmt::format("{}:{}", path, line_number));  // names the line that repeats a host
  }
  check_unique(hosts, path);
  return hosts;
}

std::string host_part(const std::string& name) {
  auto at = name.find('@');
  return at == std::string::npos ? name : name.substr(at + 1);
}

void mark_local_hosts(std::vector<Host>& hosts, const std::vector<std::string>& own_names) {
  for (auto& host : hosts) {
    // user@host logs in as that user, over ssh even to this machine (its ranks run as them).
    if (host.name.find('@') != std::string::npos) {
      host.local = false;
      continue;
    }
    const std::string h = lower(host.name);
    host.local = h == "localhost" || is_loopback_ipv6(h) || h.rfind("127.", 0) == 0 ||
                 std::any_of(own_names.begin(), own_names.end(), [&h](const std::string& own) { return lower(own) == h; });
  }
}

}  // namespace dlrun::launcher
