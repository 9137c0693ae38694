#pragma once
// This machine's addresses: which one reaches a given host, which interface holds an
// address (for GLOO_SOCKET_IFNAME), and the names and addresses that mean "this machine".
// IPv4. Thread-safe.

#include <string>
#include <vector>

namespace dlrun::launcher {

// The local IPv4 address the kernel would use to reach `host` (resolved by name).
// Throws ConfigError when the host cannot be resolved.
std::string route_source_address(const std::string& host);

// The IPv4 address of interface `name`. Throws ConfigError naming the interfaces there are.
std::string interface_address(const std::string& name);

// The interface that holds `address`, or empty.
std::string interface_of_address(const std::string& address);

// Host name and every local IPv4 address: what counts as "this machine" in --hosts.
std::vector<std::string> own_names();

// 32 random hex digits from the kernel's generator.
std::string random_secret();

}  // namespace dlrun::launcher
