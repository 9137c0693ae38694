#include "dlrun/launcher/run_dir.hpp"

#include <fcntl.h>
#include <pwd.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cstring>
#include <ctime>
#include <filesystem>
#include <random>

#include <fmt/format.h>

#include "dlrun/error.hpp"
#include "dlrun/launcher/fd_io.hpp"
#include "dlrun/launcher/private_files.hpp"
#include "dlrun/launcher/text.hpp"
#include "dlrun/launcher/time_stamp.hpp"
#include "dlrun/protocol.hpp"

namespace fs = std::filesystem;

namespace dlrun::launcher {

std::string make_job_id() {
  std::random_device device;
  return fmt::format("{}-{:04x}", local_compact_stamp(std::time(nullptr)), device() & 0xffff);
}

std::string plain_path(const std::string& path) {
  fs::path p = fs::absolute(path).lexically_normal();
  return (p.has_filename() || !p.has_parent_path() ? p : p.parent_path()).string();
}

std::string dlrun_home(const Environment& env) {
  auto get = [&](const char* key) -> std::string {
    auto it = env.find(key);
    return it == env.end() ? std::string() : it->second;
  };
  if (auto home = get(env::k_home); !home.empty()) return home;
  // A relative XDG_STATE_HOME is ignored, as the XDG specification says (it named another
  // store in every directory dlrun was run from).
  if (auto state = get("XDG_STATE_HOME"); !state.empty() && state.front() == '/') return state + "/dlrun";
  // A HOME that is no directory (HOME=/nonexistent, as nobody's and many services' are) is none:
  // the run was refused for a run directory it could not make, where torchrun runs.
  if (auto home = get("HOME"); !home.empty() && fs::is_directory(home)) return home + "/.local/state/dlrun";
  // No HOME (cron, a service, env -i): the home the user database gives, when it is theirs.
  if (const passwd* pw = ::getpwuid(::getuid()); pw && pw->pw_dir && pw->pw_dir[0] == '/') {
    struct stat st {};
    if (::stat(pw->pw_dir, &st) == 0 && S_ISDIR(st.st_mode) && st.st_uid == ::getuid()) {
      return std::string(pw->pw_dir) + "/.local/state/dlrun";
    }
  }
  return fmt::format("/tmp/dlrun-{}", ::getuid());
}

std::string prepare_run_dir(const std::string& requested, const std::string& job_id,
                            const Environment& env, bool* created) {
  const bool is_default = requested.empty();
  fs::path dir = is_default ? fs::path(dlrun_home(env)) / "runs" / job_id : fs::path(requested);
  std::error_code ec;
  // A job's default run directory is its own: a link there is another job's, left by a run that
  // was refused under that number (its --run-dir), and this job would run, and resume, there.
  if (is_default && fs::is_symlink(dir, ec)) fs::remove(dir, ec);
  const bool made = fs::create_directories(dir, ec);
  if (created) *created = made;
  if (ec) {
    throw ConfigError(fmt::format("cannot create run directory {}: {}{}", dir.string(), ec.message(),
                                  is_default ? fmt::format(" (set {} or --run-dir)", env::k_home) : ""));
  }
  dir = fs::absolute(dir, ec);
  tighten_home(dlrun_home(env));  // one an older dlrun left readable by others
  check_own_directory(dir.string(), is_default ? "run directory" : "--run-dir");
  if (!is_default && !job_id.empty()) {
    // `dlrun resize JOB` and friends find every run under $DLRUN_HOME/runs/JOB.
    fs::path runs = fs::path(dlrun_home(env)) / "runs";
    fs::create_directories(runs, ec);
    fs::create_directory_symlink(dir, runs / job_id, ec);
  }
  if (is_default) {
    fs::path latest = dir.parent_path() / "latest";
    fs::path temp = dir.parent_path() / fmt::format(".latest.{}", ::getpid());
    fs::create_directory_symlink(dir.filename(), temp, ec);
    if (!ec) fs::rename(temp, latest, ec);
  }
  return dir.string();
}

std::string prepare_log_dir(const std::string& requested, const std::string& run_dir) {
  if (requested.empty()) return run_dir;
  std::error_code ec;
  fs::create_directories(requested, ec);
  if (ec || !fs::is_directory(requested)) {
    throw ConfigError(fmt::format("cannot create the log directory {}: {}", requested,
                                  ec ? ec.message() : "it is not a directory"));
  }
  check_own_directory(requested, "log directory");
  return requested;
}

std::string rank_log_path(const std::string& log_dir, int rank) {
  return fmt::format("{}/rank-{}.log", log_dir, rank);
}

bool handles_stop(const std::string& run_dir) {
  return !run_dir.empty() && ::access((run_dir + "/" + run_files::k_handles_stop).c_str(), F_OK) == 0;
}

namespace {
constexpr const char* k_cancel_note = "cancelled-by";
}

void write_cancel_note(const std::string& run_dir, const std::string& what, int supervisor_pid) {
  if (run_dir.empty()) return;
  try {
    write_file_atomically(run_dir + "/" + k_cancel_note, fmt::format("{}\n{}\n", supervisor_pid, what));
  } catch (const Error&) {
    // Not ours to write (root cancelling a user's job may be refused by its permissions): the job
    // is stopped all the same, and says only which signal stopped it.
  }
}

std::optional<std::string> cancel_note(const std::string& run_dir, int supervisor_pid) {
  if (run_dir.empty()) return std::nullopt;
  auto text = read_file(run_dir + "/" + k_cancel_note);
  if (!text) return std::nullopt;
  const size_t newline = text->find('\n');
  if (newline == std::string::npos || parse_int(trim(text->substr(0, newline))) != supervisor_pid) {
    return std::nullopt;
  }
  std::string note(trim(text->substr(newline + 1)));
  if (note.empty() || note.size() > 200 ||
      std::any_of(note.begin(), note.end(), [](unsigned char c) { return c < 0x20 || c == 0x7f; })) {
    return std::nullopt;
  }
  return note;
}

}  // namespace dlrun::launcher
