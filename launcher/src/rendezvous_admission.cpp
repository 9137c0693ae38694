// The rendezvous's admission policy (rendezvous_admission.hpp). Pure.

#include "dlrun/launcher/rendezvous_admission.hpp"

#include <algorithm>

namespace dlrun::launcher {

std::size_t pending_limit(std::size_t configured, std::uint64_t descriptor_limit) {
  std::uint64_t quarter = descriptor_limit / 4;
  return std::max<std::size_t>(1, static_cast<std::size_t>(std::min<std::uint64_t>(configured, quarter)));
}

bool secrets_equal(std::string_view expected, std::string_view given) {
  // Every byte of `given` is looked at whatever the bytes before it were; a length that
  // differs counts as a difference without cutting the loop short.
  unsigned char difference = expected.size() == given.size() ? 0 : 1;
  for (std::size_t i = 0; i < given.size(); ++i) {
    unsigned char want = expected.empty() ? 0 : static_cast<unsigned char>(expected[i % expected.size()]);
    difference |= static_cast<unsigned char>(want ^ static_cast<unsigned char>(given[i]));
  }
  return difference == 0 && !expected.empty();
}

PendingConnections::PendingConnections(std::size_t limit, double first_line_seconds)
    : m_limit(std::max<std::size_t>(1, limit)), m_first_line_seconds(first_line_seconds) {}

std::optional<int> PendingConnections::admit(int fd, double now) {
  std::optional<int> evicted;
  if (m_waiting.size() >= m_limit) {
    evicted = m_waiting.front().first;
    m_waiting.erase(m_waiting.begin());
  }
  m_waiting.emplace_back(fd, now);
  return evicted;
}

void PendingConnections::remove(int fd) {
  m_waiting.erase(std::remove_if(m_waiting.begin(), m_waiting.end(), [fd](const auto& w) { return w.first == fd; }),
                  m_waiting.end());
}

std::vector<int> PendingConnections::expire(double now) {
  std::vector<int> expired;
  while (!m_waiting.empty() && now - m_waiting.front().second >= m_first_line_seconds) {
    expired.push_back(m_waiting.front().first);
    m_waiting.erase(m_waiting.begin());
  }
  return expired;
}

std::optional<int> PendingConnections::oldest() const {
  if (m_waiting.empty()) return std::nullopt;
  return m_waiting.front().first;
}

bool PendingConnections::contains(int fd) const {
  return std::any_of(m_waiting.begin(), m_waiting.end(), [fd](const auto& w) { return w.first == fd; });
}

RefusalLog::RefusalLog(int burst, double interval_seconds) : m_burst(burst), m_interval(interval_seconds) {}

bool RefusalLog::admit(double now) {
  if (!m_open || now - m_window_start >= m_interval) {
    m_ended += m_unlogged;
    m_unlogged = 0;
    m_in_window = 0;
    m_window_start = now;
    m_open = true;
  }
  if (m_in_window < m_burst) {
    ++m_in_window;
    return true;
  }
  ++m_unlogged;
  return false;
}

int RefusalLog::take_unlogged(double now) {
  if (m_open && now - m_window_start >= m_interval) {
    m_ended += m_unlogged;
    m_unlogged = 0;
    m_open = false;
  }
  int taken = m_ended;
  m_ended = 0;
  return taken;
}

std::string rendezvous_bind_address(const std::vector<std::string>& contacts) {
  if (contacts.empty()) return "0.0.0.0";
  bool same = std::all_of(contacts.begin(), contacts.end(), [&](const std::string& c) { return c == contacts[0]; });
  return same ? contacts[0] : "0.0.0.0";
}

bool is_loopback_address(const std::string& address) {
  return address.rfind("127.", 0) == 0 || address == "::1" || address == "localhost";
}

std::vector<std::string> contacts_all_can_reach(std::vector<std::string> contacts) {
  auto outside = std::find_if(contacts.begin(), contacts.end(), [](const std::string& c) { return !is_loopback_address(c); });
  if (outside == contacts.end()) return contacts;
  const std::string address = *outside;
  for (auto& c : contacts) {
    if (is_loopback_address(c)) c = address;
  }
  return contacts;
}

}  // namespace dlrun::launcher
