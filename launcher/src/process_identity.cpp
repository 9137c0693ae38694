#include "dlrun/launcher/process_identity.hpp"

#include "dlrun/launcher/fd_io.hpp"

#include <unistd.h>

#include <sstream>
#include <string>

namespace dlrun::launcher {
namespace {

// Fields after the command name, which may itself contain spaces and parentheses.
bool read_stat(pid_t pid, char& state, uint64_t& start_time) {
  // read(), not an ifstream: a process ending meanwhile fails it with ESRCH, which libstdc++
  // throws from an ifstream.
  const std::string text = read_file("/proc/" + std::to_string(pid) + "/stat").value_or("");
  auto close = text.rfind(')');
  if (close == std::string::npos) return false;
  std::istringstream rest(text.substr(close + 2));
  rest >> state;
  std::string skip;
  for (int field = 4; field < 22; ++field) rest >> skip;  // fields 4..21
  rest >> start_time;
  return static_cast<bool>(rest);
}

}  // namespace

ProcessIdentity ProcessIdentity::self() { return of(::getpid()); }

ProcessIdentity ProcessIdentity::of(pid_t pid) {
  char state = 0;
  uint64_t start = 0;
  if (pid <= 0 || !read_stat(pid, state, start)) return {};
  return {pid, start};
}

bool ProcessIdentity::alive() const {
  char state = 0;
  uint64_t start = 0;
  if (pid <= 0 || !read_stat(pid, state, start)) return false;
  return start == start_time && state != 'Z' && state != 'X';
}

}  // namespace dlrun::launcher
