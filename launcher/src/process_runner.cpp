// The real ProcessRunner: members are forked and exec'd by a WorkerGroup, an orphan guard
// holds their process groups in case dlrun dies, and SIGCHLD arrives through the io_context.

#include <signal.h>

#include <boost/asio/signal_set.hpp>

#include "dlrun/launcher/member_group.hpp"
#include "dlrun/launcher/orphan_guard.hpp"
#include "dlrun/launcher/worker_group.hpp"

namespace dlrun::launcher {
namespace {

class LocalProcessRunner : public ProcessRunner {
 public:
  explicit LocalProcessRunner(boost::asio::io_context& io) : m_io(io), m_child_signal(io, SIGCHLD) {}

  void begin(std::function<void()> children_changed) override {
    m_guard.start();
    m_children_changed = std::move(children_changed);
    listen();
  }

  void end() override {
    m_child_signal.cancel();
    m_guard.release();
  }

  std::unique_ptr<MemberGroup> start(const std::vector<Member>& members,
                                     const OutputFactory& make_output) override {
    auto group = std::make_unique<WorkerGroup>(m_io, m_guard);
    group->start(members, make_output);
    return group;
  }

 private:
  void listen() {
    m_child_signal.async_wait([this](const boost::system::error_code& ec, int) {
      if (ec) return;
      m_children_changed();
      listen();
    });
  }

  boost::asio::io_context& m_io;
  boost::asio::signal_set m_child_signal;
  OrphanGuard m_guard;
  std::function<void()> m_children_changed;
};

}  // namespace

std::unique_ptr<ProcessRunner> make_process_runner(boost::asio::io_context& io) {
  return std::make_unique<LocalProcessRunner>(io);
}

}  // namespace dlrun::launcher
