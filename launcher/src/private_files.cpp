#include "dlrun/launcher/private_files.hpp"

#include <sys/stat.h>
#include <unistd.h>

#include <cstdio>
#include <cstdlib>

#include "dlrun/launcher/run_dir.hpp"
#include "dlrun/protocol.hpp"

namespace dlrun::launcher {
namespace {

mode_t g_started = 0;
bool g_known = false;

void tighten(const std::string& path, mode_t mode) {
  struct stat st {};
  if (::lstat(path.c_str(), &st) != 0 || st.st_uid != ::geteuid()) return;
  if ((st.st_mode & 07777) != mode) ::chmod(path.c_str(), mode);
}

}  // namespace

void keep_files_private(const Environment& env) {
  auto it = env.find(env::k_umask);
  const std::string inherited = it == env.end() ? std::string() : it->second;
  mode_t current = ::umask(077);
  if (!g_known) {
    g_started = current;
    if (!inherited.empty()) {
      char* end = nullptr;
      long value = std::strtol(inherited.c_str(), &end, 8);
      if (*end == '\0' && value >= 0 && value <= 0777) g_started = static_cast<mode_t>(value);
    }
    g_known = true;
  }
  if (is_shared_home(dlrun_home(env))) ::umask(007);
}

mode_t started_umask() {
  if (g_known) return g_started;
  mode_t current = ::umask(022);
  ::umask(current);
  return current;
}

std::string started_umask_text() {
  char text[8];
  std::snprintf(text, sizeof text, "%03o", static_cast<unsigned>(started_umask()));
  return text;
}

bool is_shared_home(const std::string& home) {
  struct stat st {};
  // Group-writable alone is what a umask of 002 gives every directory; a shared store is
  // made on purpose, setgid (install -d -m 2770 -g GROUP DIR).
  return ::stat(home.c_str(), &st) == 0 && S_ISDIR(st.st_mode) && (st.st_mode & S_IWGRP) && (st.st_mode & S_ISGID);
}

void tighten_home(const std::string& home) {
  if (is_shared_home(home)) return;
  tighten(home, 0700);
  for (const char* suffix : {"", "-wal", "-shm"}) tighten(home + "/jobs.db" + suffix, 0600);
}

}  // namespace dlrun::launcher
