#pragma once
// Waits until a TCP port accepts connections. LibTorch's TCPStore client, when the store is
// not listening yet, sleeps a whole second before it tries again; ranks that start a few
// milliseconds before rank 0 (every restart or resize of a job) would lose that second.
// Probing with short non-blocking connects first lets the store connect at its first try.
// Internal; POSIX sockets, no LibTorch.

#include <chrono>
#include <cstdint>
#include <string>

namespace dlrun::runtime {

// True once host:port accepted a connection (closed again at once), false at the deadline.
bool wait_until_listening(const std::string& host, uint16_t port,
                          std::chrono::milliseconds timeout);

}  // namespace dlrun::runtime
