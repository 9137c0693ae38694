#pragma once
// TCP ports for the rendezvous (MASTER_PORT). dlrun picks a port the kernel says is free
// instead of a fixed 29500, so two jobs on one host never collide; a port the user chose
// is checked before any rank starts. Thread-safe (no shared state).

#include <string>

namespace dlrun::launcher {

// A port that was free on `address` a moment ago (bind to port 0, read it back, close).
int pick_free_port(const std::string& address);

// Throws ConfigError when `port` cannot be bound on `address` (busy, or not ours to bind),
// naming the port and what to do.
void ensure_port_free(const std::string& address, int port);

}  // namespace dlrun::launcher
