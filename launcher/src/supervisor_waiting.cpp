// Ranks left waiting for ranks that ended with 0: see supervisor.hpp (supervisor_waiting.cpp).

#include <fmt/format.h>

#include <algorithm>

#include "dlrun/launcher/supervisor.hpp"
#include "dlrun/launcher/supervisor_policy.hpp"
#include "dlrun/launcher/text.hpp"
#include "dlrun/log.hpp"

namespace dlrun::launcher {

void Supervisor::watch_waiting_ranks() {
  if (m_said_waiting || m_waiting_watched || m_phase != Phase::running || m_failure || !m_group ||
      m_group->running() == 0)
    return;
  m_waiting_cpu.assign(m_group->size(), std::nullopt);
  for (size_t i = 0; i < m_group->size(); ++i) {
    if (!m_group->exit_status(i)) m_waiting_cpu[i] = m_group->cpu_seconds(i);
  }
  m_waiting_watched = true;
  m_waiting_timer.expires_after(
      std::chrono::duration_cast<std::chrono::steady_clock::duration>(std::chrono::duration<double>(m_job.waiting_check_seconds)));
  m_waiting_timer.async_wait([this](const boost::system::error_code& ec) {
    if (ec) return;
    m_waiting_watched = false;
    check_waiting_ranks();
  });
}

void Supervisor::check_waiting_ranks() {
  if (m_said_waiting || m_phase != Phase::running || m_failure || !m_group || m_group->running() == 0) return;
  std::vector<std::string> waiting, ended;
  for (size_t i = 0; i < m_group->size(); ++i) {
    const auto& status = m_group->exit_status(i);
    if (status) {
      if (status->success()) ended.push_back(m_group->member(i).name);
      continue;
    }
    const auto now = m_group->cpu_seconds(i);
    const double over = m_job.waiting_check_seconds;
    if (!now || i >= m_waiting_cpu.size() || !m_waiting_cpu[i] || !waits_idle(*now - *m_waiting_cpu[i], over)) {
      watch_waiting_ranks();  // one works: look again later (it may wait once it is done)
      return;
    }
    waiting.push_back(m_group->member(i).name);
  }
  m_said_waiting = true;
  const bool one = waiting.size() == 1;
  log::warn("{} ended with code 0, and {} {} used no CPU in the last {} s: if {} for {} (a collective, the "
            "rendezvous: data split unevenly across ranks, a rank that returned early?), {} for good. Ctrl-C "
            "stops the job; --watchdog SECONDS ends such a wait as a failure",
            listed(ended), one ? waiting.front() : fmt::format("the other {}", counted(static_cast<long long>(waiting.size()), m_job.member_noun)),
            one ? "has" : "have", m_job.waiting_check_seconds, one ? "it waits" : "they wait",
            ended.size() == 1 ? "it" : "them", one ? "it waits" : "they wait");
}

}  // namespace dlrun::launcher
