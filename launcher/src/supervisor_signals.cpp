// The Supervisor's passing on of SIGUSR1 and SIGUSR2 (a SIGUSR2 with no `dlrun resize` request
// waiting): to each rank's own process, and the job goes on. See supervisor.hpp and
// docs/local.md ("Signals").

#include <signal.h>

#include <algorithm>

#include <boost/asio/post.hpp>
#include <fmt/format.h>
#include <fmt/ranges.h>

#include "dlrun/launcher/exit_status.hpp"
#include "dlrun/launcher/process.hpp"
#include "dlrun/launcher/supervisor.hpp"
#include "dlrun/log.hpp"

namespace dlrun::launcher {
namespace {

constexpr auto k_recheck = std::chrono::milliseconds(50);  // a held signal: does the rank handle it now?
constexpr auto k_say_held_after = std::chrono::seconds(5);

}  // namespace

void Supervisor::listen_for_passed_signals() {
  m_passed_signals.async_wait([this](const boost::system::error_code& ec, int signal) {
    if (ec) return;
    pass_on(signal);
    listen_for_passed_signals();
  });
}

void Supervisor::pass_on(int signal) {
  if (m_job.pass_signal) {  // dlrun run: each host's agent passes it on to its ranks
    if (!m_job.options.quiet) log::info("got {}: passing it on to the hosts' ranks (the job goes on)", signal_name(signal));
    m_job.pass_signal(signal);
    return;
  }
  if (m_phase == Phase::done) {
    log::warn("got {}: not passed on, the job has ended", signal_name(signal));
    return;
  }
  HeldSignal held;
  held.signal = signal;
  held.since = std::chrono::steady_clock::now();
  // Ranks that are stopping do not get it; the next attempt's do, if one comes (a restart, a
  // resize), else it is dropped with a warning when the job ends.
  held.next_attempt = !m_group || m_phase != Phase::running;
  if (!held.next_attempt) {
    for (size_t i = 0; i < m_group->size(); ++i) {
      if (!m_group->exit_status(i)) held.members.push_back(i);
    }
  }
  if (!m_job.options.quiet) {
    if (held.next_attempt) {
      log::info("got {}: passing it on to the {}s when they start again (the job goes on)", signal_name(signal),
                m_job.member_noun);
    } else {
      log::info("got {}: passing it on to {} {}{} (the job goes on)", signal_name(signal), held.members.size(),
                m_job.member_noun, held.members.size() == 1 ? "" : "s");
    }
  }
  m_held_signals.push_back(std::move(held));
  deliver_held_signals();
}

void Supervisor::carry_held_signals_over() {
  // What a rank of the attempt that ends had not taken yet goes to every rank of the next one
  // (new processes, none of which has had it).
  for (auto& held : m_held_signals) {
    if (held.next_attempt) continue;
    held.next_attempt = true;
    held.members.clear();
  }
}

void Supervisor::drop_held_signals(const std::string& why) {
  for (const auto& held : m_held_signals) {
    log::warn("{} was not passed on to {}: {}", signal_name(held.signal),
              held.next_attempt ? "the next " + m_job.member_noun + "s"
                                : fmt::format("{} {}{}", held.members.size(), m_job.member_noun,
                                              held.members.size() == 1 ? "" : "s"),
              why);
  }
  m_held_signals.clear();
  m_pass_timer.cancel();
}

void Supervisor::hand_held_signals_to_new_ranks() {
  bool any = false;
  for (auto& held : m_held_signals) {
    if (!held.next_attempt) continue;
    held.next_attempt = false;
    held.since = std::chrono::steady_clock::now();
    held.members.clear();
    for (size_t i = 0; i < m_group->size(); ++i) held.members.push_back(i);
    any = true;
  }
  if (any) boost::asio::post(m_io, [this] { deliver_held_signals(); });
}

void Supervisor::deliver_held_signals() {
  // While the ranks stop, what they have not taken waits: for the next attempt's ranks if one
  // comes (carry_held_signals_over), else it is dropped with a word when the job ends.
  if (m_phase != Phase::running || !m_group) return;
  const auto now = std::chrono::steady_clock::now();
  bool waiting = false;
  for (auto& held : m_held_signals) {
    if (held.next_attempt) continue;
    auto& members = held.members;
    members.erase(std::remove_if(members.begin(), members.end(),
                                 [&](size_t i) {
                                   if (i >= m_group->size() || m_group->exit_status(i)) return true;  // ended
                                   const pid_t pid = m_group->pid(i);
                                   // Sent only once the rank handles it: its default action ends a
                                   // process, and a rank still starting has no handler yet.
                                   if (!process_handles_signal(pid, held.signal)) return false;
                                   ::kill(pid, held.signal);
                                   return true;
                                 }),
                  members.end());
    if (members.empty()) continue;
    waiting = true;
    if (!held.said && now - held.since >= k_say_held_after) {
      held.said = true;
      std::vector<std::string> names;
      for (size_t i : members) names.push_back(m_group->member(i).name);
      log::warn("{} {} set no handler for {} yet: it waits until {} do{} (it would end {}); a wrapper script "
                "must trap it and pass it on, or exec the program",
                fmt::join(names, ", "), members.size() == 1 ? "has" : "have", signal_name(held.signal),
                members.size() == 1 ? "it" : "they", members.size() == 1 ? "es" : "", members.size() == 1 ? "it" : "them");
    }
  }
  m_held_signals.erase(std::remove_if(m_held_signals.begin(), m_held_signals.end(),
                                      [](const HeldSignal& held) { return !held.next_attempt && held.members.empty(); }),
                       m_held_signals.end());
  if (!waiting) return;
  m_pass_timer.expires_after(k_recheck);
  m_pass_timer.async_wait([this](const boost::system::error_code& ec) {
    if (!ec) deliver_held_signals();
  });
}

}  // namespace dlrun::launcher
