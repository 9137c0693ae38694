#include "dlrun/launcher/cpu_time.hpp"

#include "dlrun/launcher/fd_io.hpp"

#include <dirent.h>
#include <unistd.h>

#include <cstdlib>
#include <memory>
#include <sstream>
#include <string>

namespace dlrun::launcher {
namespace {

struct Stat {
  long long parent = 0;
  long long group = 0;
  unsigned long long ticks = 0;  // utime + stime + cutime + cstime
};

// /proc/PID/stat's fields after the command name, which may hold spaces and parentheses.
std::optional<Stat> read_stat(const std::string& pid) {
  // Not an ifstream: a process that ends while it is read fails read() with ESRCH, which
  // libstdc++'s filebuf throws as "basic_filebuf::underflow error reading the file" (dlrun
  // ended with 70 while it watched ranks that had children coming and going).
  const std::string text = read_file("/proc/" + pid + "/stat").value_or("");
  const auto close = text.rfind(')');
  if (close == std::string::npos || close + 2 > text.size()) return std::nullopt;
  std::istringstream rest(text.substr(close + 2));
  std::string skip;
  Stat stat;
  rest >> skip >> stat.parent >> stat.group;  // fields 3 (state), 4 (ppid), 5 (pgrp)
  for (int field = 6; field < 14; ++field) rest >> skip;
  unsigned long long ticks[4] = {};  // fields 14 to 17
  for (auto& value : ticks) rest >> value;
  if (!rest) return std::nullopt;
  stat.ticks = ticks[0] + ticks[1] + ticks[2] + ticks[3];
  return stat;
}

double seconds(unsigned long long ticks) {
  const long per_second = ::sysconf(_SC_CLK_TCK);
  return per_second > 0 ? static_cast<double>(ticks) / static_cast<double>(per_second) : 0.0;
}

// Calls `each(pid, stat)` for every process of process group `group` /proc lists; false when
// /proc cannot be read.
template <typename Each>
bool for_each_in_group(pid_t group, Each each) {
  std::unique_ptr<DIR, int (*)(DIR*)> proc(::opendir("/proc"), ::closedir);
  if (!proc) return false;
  while (const dirent* entry = ::readdir(proc.get())) {
    if (entry->d_name[0] < '1' || entry->d_name[0] > '9') continue;  // a process's directory
    const auto stat = read_stat(entry->d_name);
    if (stat && stat->group == group) each(static_cast<pid_t>(std::atol(entry->d_name)), *stat);
  }
  return true;
}

}  // namespace

std::optional<double> cpu_seconds(pid_t pid) {
  if (pid <= 0) return std::nullopt;
  const auto stat = read_stat(std::to_string(pid));
  if (!stat) return std::nullopt;
  return seconds(stat->ticks);
}

std::vector<pid_t> children_in_group(pid_t group, pid_t parent) {
  std::vector<pid_t> found;
  if (group <= 0) return found;
  for_each_in_group(group, [&](pid_t pid, const Stat& stat) {
    if (stat.parent == parent) found.push_back(pid);
  });
  return found;
}

std::optional<double> group_cpu_seconds(pid_t group) {
  if (group <= 0) return std::nullopt;
  unsigned long long ticks = 0;
  bool any = false;
  for_each_in_group(group, [&](pid_t, const Stat& stat) {
    ticks += stat.ticks;
    any = true;
  });
  if (!any) return std::nullopt;
  return seconds(ticks);
}

}  // namespace dlrun::launcher
