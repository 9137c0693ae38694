#pragma once
// TCP ports for the rendezvous (MASTER_PORT). dlrun picks a port the kernel says is free
// instead of a fixed 29500, so two jobs on one host never collide; a port the user chose
// is checked before any rank starts. Thread-safe (no shared state).

#include <string>

namespace dlrun::launcher {

// A port that was free on `address` a moment ago (bind to port 0, read it back, close).
// With `claims` (a file: $DLRUN_HOME/port-claims), it is also one that no other dlrun of this
// user picked in the last k_port_claim_seconds: the kernel may hand the same free port to
// two jobs starting together, before either's rank 0 binds it (seen: 4 jobs started at once,
// 2 given one port). Claims that cannot be kept (the file cannot be opened, is a symlink or
// another user's) are skipped, and the kernel's pick stands.
int pick_free_port(const std::string& address, const std::string& claims = "");

inline constexpr double k_port_claim_seconds = 60;

// This user's claims file: $DLRUN_HOME/port-claims, from dlrun's own environment (never a
// job's [env]).
std::string port_claims_file();

// Claims `port` in the file `claims` ("PORT SECONDS" lines, under an exclusive flock, claims
// older than k_port_claim_seconds at `now` dropped): false when a younger claim holds it.
// True, claiming nothing, when the file cannot be used.
bool claim_port(const std::string& claims, int port, double now);

// Throws ConfigError when `address` (an IPv4 address; a host name is not checked) is not one
// of this machine's: the ranks' rendezvous must listen on it here.
void ensure_local_address(const std::string& address);

// Throws ConfigError when `port` cannot be bound on `address` (busy, or not ours to bind),
// naming the port and what to do.
void ensure_port_free(const std::string& address, int port);

}  // namespace dlrun::launcher
