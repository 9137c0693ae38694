#include "dlrun/launcher/escaped_processes.hpp"

#include <dirent.h>
#include <signal.h>
#include <unistd.h>

#include <cstdlib>

#include <fmt/format.h>

#include "dlrun/launcher/fd_io.hpp"
#include "dlrun/protocol.hpp"

namespace dlrun::launcher {
namespace {

// The whole of /proc/PID/environ, or empty when it cannot be read (gone, another user's).
std::string read_environ(const char* pid) {
  return read_file(fmt::format("/proc/{}/environ", pid)).value_or(std::string());
}

}  // namespace

std::string supervisor_token(const ProcessIdentity& supervisor) {
  return fmt::format("{}-{}", supervisor.pid, supervisor.start_time);
}

bool environment_has_token(std::string_view block, std::string_view token) {
  const std::string entry = fmt::format("{}={}", env::k_supervisor_id, token);
  size_t start = 0;
  while (start < block.size()) {
    size_t end = block.find('\0', start);
    if (end == std::string_view::npos) end = block.size();
    if (block.substr(start, end - start) == entry) return true;
    start = end + 1;
  }
  return false;
}

std::vector<pid_t> processes_with_token(std::string_view token) {
  std::vector<pid_t> found;
  DIR* proc = ::opendir("/proc");
  if (!proc) return found;
  const pid_t self = ::getpid();
  while (dirent* entry = ::readdir(proc)) {
    char* end = nullptr;
    long pid = std::strtol(entry->d_name, &end, 10);
    if (pid <= 0 || *end != '\0' || pid == self) continue;
    if (environment_has_token(read_environ(entry->d_name), token)) found.push_back(static_cast<pid_t>(pid));
  }
  ::closedir(proc);
  return found;
}

std::vector<pid_t> own_children() {
  std::vector<pid_t> children;
  DIR* tasks = ::opendir("/proc/self/task");
  if (!tasks) return children;
  while (dirent* entry = ::readdir(tasks)) {
    if (entry->d_name[0] == '.') continue;
    const std::string text =
        read_file(fmt::format("/proc/self/task/{}/children", entry->d_name)).value_or(std::string());
    const char* p = text.c_str();
    char* end = nullptr;
    for (long pid; (pid = std::strtol(p, &end, 10)) > 0; p = end) children.push_back(static_cast<pid_t>(pid));
  }
  ::closedir(tasks);
  return children;
}

int kill_processes_with_token(std::string_view token, int rounds) {
  int killed = 0;
  for (int round = 0; round < rounds; ++round) {
    auto pids = processes_with_token(token);
    if (pids.empty()) break;
    // Stopped first, so that none forks a new one between the scan and its kill.
    for (pid_t pid : pids) ::kill(pid, SIGSTOP);
    for (pid_t pid : pids) {
      if (::kill(pid, SIGKILL) == 0) ++killed;
    }
    ::usleep(1000);  // a killed process keeps its /proc entry until it is reaped
  }
  return killed;
}

}  // namespace dlrun::launcher
