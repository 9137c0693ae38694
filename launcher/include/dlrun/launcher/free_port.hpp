#pragma once
// TCP ports for the rendezvous (MASTER_PORT). dlrun picks a port the kernel says is free
// instead of a fixed 29500, so two jobs on one host never collide; a port the user chose
// is checked before any rank starts. Thread-safe (no shared state).

#include <string>

namespace dlrun::launcher {

// A port that was free on `address` a moment ago (bind to port 0, read it back, close).
// With `reservations` (a directory: $DLRUN_HOME/ports), it is also one that no other dlrun
// of this user picked in the last k_port_reservation_seconds: the kernel may hand the same
// free port to two jobs starting together, before either's rank 0 binds it (seen: 4 jobs
// started at once, 2 given one port). Reservations that cannot be kept (no directory) are
// skipped, the kernel's pick stands.
int pick_free_port(const std::string& address, const std::string& reservations = "");

inline constexpr double k_port_reservation_seconds = 60;

// Claims `port` in `dir` (a file named by it, made with O_EXCL): false when another claim
// younger than k_port_reservation_seconds holds it at `now` (seconds since the epoch); an
// older one is taken over, and stale claims are removed. True when claims cannot be kept.
bool reserve_port(const std::string& dir, int port, double now);

// Throws ConfigError when `port` cannot be bound on `address` (busy, or not ours to bind),
// naming the port and what to do.
void ensure_port_free(const std::string& address, int port);

}  // namespace dlrun::launcher
