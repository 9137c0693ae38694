// The real ProcessRunner: members are forked and exec'd by a WorkerGroup, an orphan guard
// holds their process groups in case dlrun dies, and SIGCHLD arrives through the io_context.
// Every member carries the runner's token (DLRUN_SUPERVISOR_ID): before each attempt and at
// the end, processes that left a member's process group are found by it and killed.

#include <signal.h>
#include <sys/prctl.h>

#include <boost/asio/signal_set.hpp>
#include <fmt/format.h>
#include <fmt/ranges.h>

#include <fstream>
#include <string>
#include <vector>

#include "dlrun/launcher/escaped_processes.hpp"
#include "dlrun/launcher/member_group.hpp"
#include "dlrun/launcher/orphan_guard.hpp"
#include "dlrun/launcher/worker_group.hpp"
#include "dlrun/log.hpp"

namespace dlrun::launcher {
namespace {

class LocalProcessRunner : public ProcessRunner {
 public:
  explicit LocalProcessRunner(boost::asio::io_context& io) : m_io(io), m_child_signal(io, SIGCHLD) {}

  void begin(std::function<void()> children_changed) override {
    // What a member's exit orphans (a setsid'ed or double-forked process) becomes our child.
    ::prctl(PR_SET_CHILD_SUBREAPER, 1);
    m_guard.start(m_token);
    m_children_changed = std::move(children_changed);
    listen();
  }

  void end() override {
    stop_escaped();
    m_child_signal.cancel();
    m_guard.release();
  }

  std::unique_ptr<MemberGroup> start(const std::vector<Member>& members,
                                     const OutputFactory& make_output) override {
    stop_escaped();  // what the last attempt's members left behind
    auto group = std::make_unique<WorkerGroup>(m_io, m_guard, m_token);
    group->start(members, make_output);
    return group;
  }

 private:
  // Between attempts no member runs, so a child other than the guard was adopted: only
  // then is /proc searched for the token (a few microseconds otherwise).
  void stop_escaped() {
    for (pid_t child : own_children()) {
      if (child != m_guard.pid()) {
        std::vector<std::string> names;
        for (pid_t pid : processes_with_token(m_token)) {
          std::ifstream comm(fmt::format("/proc/{}/comm", pid));
          std::string name;
          if (std::getline(comm, name) && names.size() < 3) names.push_back(fmt::format("{} (pid {})", name, pid));
        }
        const int killed = kill_processes_with_token(m_token);
        if (killed > 0) {
          // Under torchrun such a process lives on; here the job ends whole, so say it.
          log::info("stopped {} the ranks had left running outside their process groups ({}{}): a job leaves "
                    "nothing behind (docs/local.md); start what should outlive it in a session of its own "
                    "(setsid) with DLRUN_SUPERVISOR_ID unset",
                    killed == 1 ? std::string("a process") : fmt::format("{} processes", killed),
                    fmt::format("{}", fmt::join(names, ", ")), killed > static_cast<int>(names.size()) ? ", …" : "");
        }
        return;
      }
    }
  }

  void listen() {
    m_child_signal.async_wait([this](const boost::system::error_code& ec, int) {
      if (ec) return;
      m_children_changed();
      listen();
    });
  }

  boost::asio::io_context& m_io;
  boost::asio::signal_set m_child_signal;
  const std::string m_token = supervisor_token(ProcessIdentity::self());
  OrphanGuard m_guard;
  std::function<void()> m_children_changed;
};

}  // namespace

std::unique_ptr<ProcessRunner> make_process_runner(boost::asio::io_context& io) {
  return std::make_unique<LocalProcessRunner>(io);
}

}  // namespace dlrun::launcher
