#include "dlrun/launcher/private_files.hpp"

#include <grp.h>
#include <pwd.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <cstring>

#include <fmt/format.h>

#include "dlrun/error.hpp"
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

std::string user_name(uid_t uid) {
  if (const passwd* pw = ::getpwuid(uid); pw && pw->pw_name) return fmt::format("user {} (uid {})", pw->pw_name, uid);
  return fmt::format("uid {}", uid);
}

std::string group_name(gid_t gid) {
  if (const group* gr = ::getgrgid(gid); gr && gr->gr_name) return gr->gr_name;
  return std::to_string(gid);
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

void check_own_home(const std::string& home) {
  struct stat link {};
  if (::lstat(home.c_str(), &link) != 0) {
    if (errno == ENOENT) return;  // made by this user next
    throw ConfigError(fmt::format("cannot open {}: {} (set {} to a directory of yours)", home, std::strerror(errno),
                                  env::k_home));
  }
  struct stat st = link;
  if (S_ISLNK(link.st_mode) && ::stat(home.c_str(), &st) != 0) {
    throw ConfigError(fmt::format("{} is a link to nothing that can be opened: {} (set {} to a directory of yours)",
                                  home, std::strerror(errno), env::k_home));
  }
  if (!S_ISDIR(st.st_mode)) {
    throw ConfigError(fmt::format("{} is not a directory (set {} to a directory of yours)", home, env::k_home));
  }
  const uid_t me = ::geteuid();
  // A link another user made (in /tmp, where the store of a user without a home lives) could
  // be turned to another place at any time.
  const uid_t owner = S_ISLNK(link.st_mode) && link.st_uid != me ? link.st_uid : st.st_uid;
  if (owner != me) {
    throw ForeignHomeError(fmt::format(
        "{} belongs to {}, not to you: dlrun keeps jobs only in a store of your own, which no other user can "
        "change, since it runs what the store says as you (set {} to a directory of yours; to act on that user's "
        "jobs, run dlrun as them: runuser -u NAME -- dlrun …)",
        home, user_name(owner), env::k_home));
  }
  if (is_shared_home(home)) {
    throw ForeignHomeError(fmt::format(
        "{} is shared by group {} (setgid and group-writable): dlrun keeps jobs only in a store no other user can "
        "write, since any member could change a job in it to run their command as you (or as root); give each "
        "user a store of their own (unset {}: ~/.local/state/dlrun). The users' jobs share the machine's GPUs "
        "all the same (docs/security.md)",
        home, group_name(st.st_gid), env::k_home));
  }
}

void tighten_home(const std::string& home) {
  check_own_home(home);
  tighten(home, 0700);
  for (const char* suffix : {"", "-wal", "-shm"}) tighten(home + "/jobs.db" + suffix, 0600);
}

}  // namespace dlrun::launcher
