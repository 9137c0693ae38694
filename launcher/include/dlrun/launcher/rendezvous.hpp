#pragma once
// The rendezvous of a multi-host job (`dlrun run`), written up in docs/channels.md.
// The launching dlrun serves it; each host's `dlrun agent` connects, proves it belongs to
// the job with the job's secret (which travels over ssh's stdin, never on a command line),
// and once every host has joined receives its node rank, its first global rank, the world
// size and where rank 0 serves torch's store. The connection then stays open: the server
// sends a heartbeat every second and passes on stop signals; an agent that hears nothing
// for `k_silence_limit` stops its ranks, so a lost launcher or a network partition never
// leaves ranks running.
//
// Until an agent has joined, its connection is held only within RendezvousLimits
// (rendezvous_admission.hpp): a bounded number wait, each for a bounded time, so neither
// idle connections nor a flood of wrong secrets can keep the job's agents out or take the
// descriptors the job needs. A connection closed for such a limit hears `BUSY REASON` (the
// crowd's fault, not its own: the client connects and joins again), any other refusal
// `REFUSED REASON` (final).
//
// RendezvousServer runs on its own thread and is thread-safe; RendezvousClient belongs to
// one agent (its watcher runs on a thread of its own).

#include <atomic>
#include <functional>
#include <map>
#include <mutex>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include "dlrun/launcher/rendezvous_admission.hpp"

namespace dlrun::launcher {

inline constexpr double k_heartbeat_interval = 1.0;
inline constexpr double k_silence_limit = 10.0;
inline constexpr double k_busy_retry_seconds = 0.2;

struct Assignment {
  int node_rank = 0;
  int first_rank = 0;
  int world_size = 0;
  int num_nodes = 0;
  std::string master_addr;
  int master_port = 0;
  std::string plan;  // what the node runs: format_agent_plan() (agent_plan.hpp), one line
};

// Protocol lines (pure; exposed for tests).
struct JoinRequest {
  std::string secret;
  int round = 0;
  int node = 0;
  std::string address;  // the agent's own address, as the launcher sees it
  int port = 0;         // a free port there (used from node 0: MASTER_PORT)
};
std::string format_join(const JoinRequest& join);
std::optional<JoinRequest> parse_join(const std::string& line);
std::string format_assignment(const Assignment& a);
std::optional<Assignment> parse_assignment(const std::string& line);

class RendezvousServer {
 public:
  // `slots`: ranks on each node, in node order.
  RendezvousServer(std::string secret, std::vector<int> slots, std::vector<std::string> host_names,
                   double join_timeout_seconds, RendezvousLimits limits = {});
  ~RendezvousServer();

  // Binds (port 0: any free port) and starts serving. Throws SystemError. The limit on
  // connections waiting to join is fixed here, from the descriptor limit (pending_limit()).
  void start(const std::string& bind_address, int port);
  int port() const { return m_port; }
  // For the agents' stdin only: never put it in an argv or a log.
  const std::string& secret() const { return m_secret; }

  // What each node runs (format_agent_plan(), in node order), sent with its assignment.
  void set_plans(std::vector<std::string> plans);
  // A new attempt: forget the previous joins; agents must join with this round.
  void new_round(int round);
  // Whether `node`'s agent joined this round.
  bool joined(int node);
  // The exit code `node`'s agent said it ends with this round (RendezvousClient::report_end),
  // waiting up to `wait_seconds` for it; nullopt when it said none: it was killed, or its
  // connection broke.
  std::optional<int> reported_end(int node, double wait_seconds);
  // Sends SIGNAL to every agent of this round; before they have all joined, with their
  // assignments. False when the round failed (hosts missing at the join timeout): it reaches no
  // one, and the agents that joined are let go (their join fails, they end).
  bool broadcast_signal(int signal);
  // The same for a signal the agents pass on to their ranks (SIGUSR1/SIGUSR2): one that comes
  // before every agent of the round has joined waits, and is sent with the assignments.
  void pass_signal(int signal);
  // Called on the server's thread when a round fails (hosts missing after the timeout).
  void on_failure(std::function<void(const std::string& reason)> callback);
  // Called on the server's thread for a refused agent.
  void on_refused(std::function<void(const std::string& reason)> callback);
  void stop();

 private:
  void serve();
  void read_from(int fd);
  void accept_new(double now);
  void close_silent(double now);
  void check_round(double now);
  void handle_line(int fd, const std::string& line);
  // Sends `REFUSED reason` (or `BUSY reason`: closed for a limit, the agent tries again) and
  // closes the connection.
  void refuse(int fd, const std::string& reason, bool busy = false);
  void complete_round_locked();
  void drop(int fd);

  std::string m_secret;
  std::vector<int> m_slots;
  std::vector<std::string> m_names;
  std::vector<std::string> m_plans;
  double m_join_timeout;
  int m_listen_fd = -1;
  int m_port = 0;
  int m_wake[2] = {-1, -1};
  std::thread m_thread;
  std::atomic<bool> m_stopping{false};
  std::mutex m_mutex;
  int m_round = 0;
  double m_round_started = 0;
  bool m_round_complete = false;
  std::vector<int> m_signals_to_pass;  // pass_signal() before the round was complete
  bool m_round_failed = false;
  std::map<int, std::string> m_buffers;  // fd → partial line
  std::map<int, int> m_node_of_fd;       // joined agents of this round
  std::map<int, JoinRequest> m_joins;    // node → its request
  std::map<int, int> m_ends;             // node → the exit code its agent reported
  RendezvousLimits m_limits;
  PendingConnections m_pending{1, 0};    // connections that have not joined (set by start)
  RefusalLog m_refusals;
  double m_accepting_from = 0;           // after running out of descriptors: when to try again
  std::function<void(const std::string&)> m_on_failure;
  std::function<void(const std::string&)> m_on_refused;
};

class RendezvousClient {
 public:
  RendezvousClient() = default;
  ~RendezvousClient();

  // Connects to host:port within `timeout_seconds`. Throws Error naming the endpoint.
  void connect(const std::string& host, int port, double timeout_seconds);
  // The local address of the connection: how this host reaches the launcher.
  std::string local_address() const;
  // Sends the join and waits for the assignment; told BUSY, connects again and joins again
  // (every k_busy_retry_seconds) within `timeout_seconds`. Throws Error with the refusal
  // reason or when the launcher gives up.
  Assignment join(const JoinRequest& request, double timeout_seconds);
  // Watches the connection on a thread: `on_stop(signal)` runs (once) for a SIGNAL line,
  // or with SIGTERM when the launcher is gone or silent too long.
  void watch(std::function<void(int signal)> on_stop);
  // Tells the launcher the exit code this agent ends with, so that an ssh session that ends
  // without it reads as a lost host, not as the ranks' own exit code.
  void report_end(int code);

 private:
  std::string read_line(double timeout_seconds);
  void send_join(const std::string& line);
  std::string m_host;
  int m_port = 0;
  int m_fd = -1;
  std::string m_buffer;
  std::thread m_watcher;
  std::atomic<bool> m_closing{false};
};

}  // namespace dlrun::launcher
