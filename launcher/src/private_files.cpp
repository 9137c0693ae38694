#include "dlrun/launcher/private_files.hpp"

#include <grp.h>
#include <pwd.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>

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

// A user-private group (Debian's scheme: the group of the user's own name, no other member):
// its write permission gives no one else anything.
bool private_group_of(gid_t gid, uid_t uid) {
  const passwd* pw = ::getpwuid(uid);
  if (!pw || pw->pw_gid != gid || !pw->pw_name) return false;
  const std::string name = pw->pw_name;
  const group* gr = ::getgrgid(gid);
  if (!gr || !gr->gr_name || name != gr->gr_name || (gr->gr_mem && gr->gr_mem[0])) return false;
  // No other user has it as their primary group either (usermod -g alice carol).
  ::setpwent();
  bool alone = true;
  while (const passwd* other = ::getpwent()) {
    if (other->pw_gid == gid && other->pw_uid != uid) {
      alone = false;
      break;
    }
  }
  ::endpwent();
  return alone;
}

// Who besides the owner may write a directory or file of this mode, or empty.
std::string other_writers(const struct stat& st) {
  if (st.st_mode & S_IWOTH) return "every user";
  if ((st.st_mode & S_IWGRP) && !private_group_of(st.st_gid, st.st_uid)) return "group " + group_name(st.st_gid);
  return {};
}

// The first directory above `dir` through which another user could put another directory in
// its place (OpenSSH's StrictModes): one neither root's nor this user's, or one others may write
// that is not sticky (/tmp is). Empty when there is none.
std::string weak_ancestor(const std::string& dir) {
  std::error_code ec;
  const uid_t me = ::geteuid();
  // The path as written first: a link on the way that another user made (or may replace)
  // takes it elsewhere whenever they like, whatever the place it points to now.
  std::filesystem::path written = std::filesystem::absolute(dir, ec).lexically_normal();
  if (ec) return fmt::format("{} cannot be made absolute: {}", dir, ec.message());
  std::filesystem::path prefix;
  for (const auto& part : written) {
    prefix /= part;
    if (part.empty()) continue;
    struct stat link {};
    if (::lstat(prefix.c_str(), &link) != 0 || !S_ISLNK(link.st_mode)) continue;
    if (link.st_uid != 0 && link.st_uid != me) {
      return fmt::format("{} is a link of {}'s", prefix.string(), user_name(link.st_uid));
    }
  }
  std::filesystem::path path = std::filesystem::weakly_canonical(written, ec);
  if (ec) return fmt::format("{} cannot be resolved: {}", dir, ec.message());
  for (std::filesystem::path at = path.parent_path();; at = at.parent_path()) {
    struct stat st {};
    if (::stat(at.c_str(), &st) == 0) {
      if (st.st_uid != 0 && st.st_uid != me) return fmt::format("{} belongs to {}", at.string(), user_name(st.st_uid));
      if (!(st.st_mode & S_ISVTX)) {
        if (std::string writers = other_writers(st); !writers.empty()) {
          return fmt::format("{} may be written by {} (not sticky, as /tmp is)", at.string(), writers);
        }
      }
    }
    if (at == at.root_path() || !at.has_parent_path() || at.parent_path() == at) break;
  }
  return {};
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

void check_own_home(const std::string& written) {
  // "DIR/" would follow a link at DIR that lstat is meant to see.
  std::string home = written;
  while (home.size() > 1 && home.back() == '/') home.pop_back();
  struct stat link {};
  if (::lstat(home.c_str(), &link) != 0) {
    if (errno == ENOENT) {
      // Made by this user next, in its nearest existing directory: not in another user's
      // (root with a user's HOME left root's directories in that home).
      if (std::string weak = weak_ancestor(home); !weak.empty()) {
        throw ForeignHomeError(fmt::format(
            "{} would be made below a directory another user may change: {} (set {} to a directory below ones "
            "only you and root may write)",
            home, weak, env::k_home));
      }
      return;
    }
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
  // Writable by others, even for a moment: what they may have put in it (a job store of theirs)
  // would run as this user. Not made private here: what is in it is not known to be this user's.
  if (std::string writers = other_writers(st); !writers.empty()) {
    throw ForeignHomeError(fmt::format(
        "{} may be written by {}: whatever they put in it (a job store of their own) dlrun would run as you; "
        "check what it holds and make it yours alone (chmod 700 {}), or set {} to a new directory",
        home, writers, home, env::k_home));
  }
  if (std::string weak = weak_ancestor(home); !weak.empty()) {
    throw ForeignHomeError(fmt::format(
        "{} lies below a directory another user may change: {}; they could put a store of their own in its place, "
        "which dlrun would run as you (set {} to a directory below ones only you and root may write)",
        home, weak, env::k_home));
  }
  for (const char* name : {"runs", "jobs"}) {
    struct stat dir {};
    const std::string path = home + "/" + name;
    if (::lstat(path.c_str(), &dir) != 0) continue;
    if (dir.st_uid != me) {
      throw ForeignHomeError(fmt::format("{} is not yours (it belongs to {}): another user may have put it there; "
                                         "move it away and look at it",
                                         path, user_name(dir.st_uid)));
    }
  }
  for (const char* name : {"jobs.db", "jobs.db-wal", "jobs.db-shm"}) {
    struct stat file {};
    const std::string path = home + "/" + name;
    if (::lstat(path.c_str(), &file) != 0) continue;
    // (Something else of the user's there, a directory, is theirs: SQLite says what it makes of it.)
    if (file.st_uid != me || (S_ISREG(file.st_mode) && file.st_nlink != 1)) {
      throw ForeignHomeError(fmt::format(
          "{} is not a file of yours alone ({}): another user may have put it there, and dlrun would run what it "
          "says as you; move it away and look at it",
          path, file.st_uid != me ? "it belongs to " + user_name(file.st_uid)
                                  : fmt::format("{} links to it", file.st_nlink)));
    }
  }
}

void check_own_directory(const std::string& dir, const std::string& what) {
  struct stat link {};
  if (::lstat(dir.c_str(), &link) != 0) return;
  struct stat st = link;
  if (S_ISLNK(link.st_mode) && ::stat(dir.c_str(), &st) != 0) return;
  const uid_t me = ::geteuid();
  const uid_t owner = S_ISLNK(link.st_mode) && link.st_uid != me ? link.st_uid : st.st_uid;
  if (owner != me) {
    throw ConfigError(fmt::format(
        "{} {} belongs to {}, not to you: they could have put links in it to files of yours, which the job's "
        "output would overwrite, or read what it writes (give a directory of your own)",
        what, dir, user_name(owner)));
  }
  if (std::string weak = weak_ancestor(dir); !weak.empty()) {
    throw ConfigError(fmt::format(
        "{} {} lies below a directory another user may change: {}; they could put a directory of theirs in its "
        "place while the job runs, with links to files of yours that it would then write (give a directory below "
        "ones only you and root may write, or sticky ones such as /tmp)",
        what, dir, weak));
  }
}

void tighten_home(const std::string& home) {
  check_own_home(home);
  tighten(home, 0700);
  for (const char* suffix : {"", "-wal", "-shm"}) tighten(home + "/jobs.db" + suffix, 0600);
}

}  // namespace dlrun::launcher
