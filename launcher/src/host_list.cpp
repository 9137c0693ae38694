#include "dlrun/launcher/host_list.hpp"

#include <algorithm>
#include <set>
#include <sstream>

#include <fmt/format.h>

#include "dlrun/error.hpp"
#include "dlrun/launcher/text.hpp"

namespace dlrun::launcher {
namespace {

void check_unique(const std::vector<Host>& hosts, const std::string& where) {
  std::set<std::string> seen;
  for (const auto& h : hosts) {
    if (!seen.insert(h.name).second) {
      throw ConfigError(fmt::format("{}: host '{}' is listed twice; give it once with all its slots", where, h.name));
    }
  }
  if (hosts.empty()) throw ConfigError(fmt::format("{}: no hosts given", where));
}

bool valid_name(std::string_view name) {
  if (name.empty()) return false;
  return std::all_of(name.begin(), name.end(), [](char c) {
    return std::isalnum(static_cast<unsigned char>(c)) || c == '.' || c == '-' || c == '_' || c == '@';
  });
}

}  // namespace

std::vector<Host> parse_host_list(std::string_view text) {
  std::vector<Host> hosts;
  for (const auto& raw : split(text, ',')) {
    auto entry = std::string(trim(raw));
    Host host;
    auto colon = entry.rfind(':');
    host.name = entry.substr(0, colon);
    if (colon != std::string::npos) {
      auto slots = parse_int(entry.substr(colon + 1));
      if (!slots || *slots < 1) {
        throw ConfigError(fmt::format("--hosts {}: '{}': slots must be a number of ranks, at least 1 (as in a:4)", text, entry));
      }
      host.slots = *slots;
    }
    if (!valid_name(host.name)) {
      throw ConfigError(fmt::format("--hosts {}: '{}' is not a host name (expected HOST or HOST:SLOTS, comma-separated)",
                                    text, entry));
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
    if (!valid_name(host.name)) {
      throw ConfigError(fmt::format("{}:{}: '{}' is not a host name", path, line_number, host.name));
    }
    for (size_t i = 1; i < words.size(); ++i) {
      const auto& w = words[i];
      if (w.rfind("slots=", 0) == 0) {
        auto slots = parse_int(w.substr(6));
        if (!slots || *slots < 1) {
          throw ConfigError(fmt::format("{}:{}: '{}': slots must be at least 1", path, line_number, w));
        }
        host.slots = *slots;
      } else if (w.rfind("max_slots=", 0) != 0 && w.rfind("max-slots=", 0) != 0) {
        throw ConfigError(fmt::format("{}:{}: unknown word '{}' (expected: HOST slots=N)", path, line_number, w));
      }
    }
    hosts.push_back(host);
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
    std::string h = host_part(host.name);
    host.local = h == "localhost" || h == "::1" || h.rfind("127.", 0) == 0 ||
                 std::find(own_names.begin(), own_names.end(), h) != own_names.end();
  }
}

}  // namespace dlrun::launcher
