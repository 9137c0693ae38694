#pragma once
// Who the rendezvous (rendezvous.hpp) lets in before an agent has proved it belongs to the
// job, and for how long: the limits on connections that have not joined yet, which of them
// gives way to a newcomer, how the secret is compared, how often refusals are logged, and
// which address the server listens on. Written up in docs/run.md ("What the rendezvous
// accepts").
//
// Pure: the server supplies the clock (seconds on a monotonic clock) and the descriptors.
// Not thread-safe: each object belongs to the server's thread.

#include <cstddef>
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

namespace dlrun::launcher {

struct RendezvousLimits {
  // Connections that have not joined yet (never more than a quarter of the descriptor
  // limit: pending_limit()); a newcomer beyond it closes the oldest of them.
  std::size_t max_pending = 64;
  // How long a connection may take to send its join line.
  double first_line_seconds = 10;
  // The longest join line (a real one is under 100 bytes).
  std::size_t max_line_bytes = 512;
  // How long the server stops accepting when the process is out of descriptors.
  double accept_pause_seconds = 0.1;
  // Refusals logged one by one per interval; the rest are counted in one line.
  int refusals_logged = 5;
  double refusal_interval_seconds = 10;
};

// The number of connections that may wait to join at a descriptor limit of
// `descriptor_limit` (RLIMIT_NOFILE): at most `configured`, at most a quarter of the
// limit, at least 1. Whatever floods the rendezvous, three quarters stay for the job.
std::size_t pending_limit(std::size_t configured, std::uint64_t descriptor_limit);

// Whether `given` equals `expected`, in a time that depends only on their lengths (never
// on where they first differ), so the secret cannot be guessed one character at a time.
bool secrets_equal(std::string_view expected, std::string_view given);

// The connections that have not joined yet, in the order they came.
class PendingConnections {
 public:
  PendingConnections(std::size_t limit, double first_line_seconds);

  // Takes `fd`, accepted at `now`; returns the connection that must give way for it (the
  // oldest), or nothing while there is room.
  std::optional<int> admit(int fd, double now);
  // Forgets `fd` (it joined, or it is closed). Nothing happens for an unknown fd.
  void remove(int fd);
  // Removes and returns the connections that have not sent their line within the limit.
  std::vector<int> expire(double now);
  // The oldest connection, to close when the process runs out of descriptors.
  std::optional<int> oldest() const;
  bool contains(int fd) const;
  std::size_t size() const { return m_waiting.size(); }
  std::size_t limit() const { return m_limit; }

 private:
  std::size_t m_limit;
  double m_first_line_seconds;
  std::vector<std::pair<int, double>> m_waiting;  // fd, accepted at; oldest first
};

// The first `burst` events of each interval are logged one by one; the others only counted,
// and their number is taken once their interval is over.
class RefusalLog {
 public:
  RefusalLog(int burst, double interval_seconds);

  // An event at `now`: true when it is to be logged in full.
  bool admit(double now);
  // The events not logged in an interval that has ended (0 when none); counted once.
  int take_unlogged(double now);
  double interval() const { return m_interval; }

 private:
  int m_burst;
  double m_interval;
  double m_window_start = 0;
  bool m_open = false;
  int m_in_window = 0;
  int m_unlogged = 0;  // in the open interval
  int m_ended = 0;     // in intervals that are over, not yet taken
};

// Where the server listens, given the address each host reaches it at: that address when
// they all use the same one (127.0.0.1 for a job on this machine alone), otherwise every
// interface (0.0.0.0).
std::string rendezvous_bind_address(const std::vector<std::string>& contacts);

// The address each host is to reach the rendezvous at, from the address each reaches this
// machine at: a host that reaches it over loopback is this machine (an ssh alias for
// 127.0.0.1, user@localhost, a name /etc/hosts maps to 127.0.1.1), and where other hosts reach
// it from outside, it takes the first outside address too. Its agent's address is what the
// others get as MASTER_ADDR (node 0's) and what Gloo and NCCL bind to: 127.0.0.1 there left
// every other host's ranks unable to meet.
std::vector<std::string> contacts_all_can_reach(std::vector<std::string> contacts);
bool is_loopback_address(const std::string& address);

}  // namespace dlrun::launcher
