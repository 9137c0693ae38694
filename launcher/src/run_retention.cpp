#include "dlrun/launcher/run_retention.hpp"
#include "dlrun/launcher/run_dir.hpp"

#include <fcntl.h>
#include <fmt/format.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <ctime>
#include <filesystem>
#include <map>
#include <set>

#include "dlrun/error.hpp"
#include "dlrun/launcher/config_file.hpp"
#include "dlrun/launcher/fd_io.hpp"
#include "dlrun/launcher/job_queue.hpp"
#include "dlrun/protocol.hpp"

namespace fs = std::filesystem;

namespace dlrun::launcher {
namespace {

constexpr double k_day = 24 * 3600;
constexpr const char* k_stamp = ".last-clean";

// True when `path` lies inside `dir` (both made absolute and normal, no symlink followed).
bool inside(const fs::path& path, const fs::path& dir) {
  const auto p = path.lexically_normal();
  const auto d = dir.lexically_normal();
  auto [end, unused] = std::mismatch(d.begin(), d.end(), p.begin(), p.end());
  return end == d.end() && p != d;
}

uint64_t size_of(const fs::path& dir) {
  uint64_t bytes = 0;
  std::error_code ec;
  for (auto it =
           fs::recursive_directory_iterator(dir, fs::directory_options::skip_permission_denied, ec);
       !ec && it != fs::recursive_directory_iterator(); it.increment(ec)) {
    if (it->is_regular_file(ec) && !it->is_symlink(ec)) bytes += it->file_size(ec);
  }
  return bytes;
}

// Removes `path` (a directory, or a link), adding to `report`; a dry run only counts.
void remove_path(const fs::path& path, bool dry_run, CleanReport& report) {
  std::error_code ec;
  const bool link = fs::is_symlink(path, ec);
  if (!link) report.bytes += size_of(path);
  if (link) ++report.links;
  report.paths.push_back(path.string());
  if (dry_run) return;
  if (link) {
    fs::remove(path, ec);
  } else {
    fs::remove_all(path, ec);
  }
  if (ec) throw Error(fmt::format("cannot remove {}: {}", path.string(), ec.message()));
}

// An id `make_job_id()` made: yyyymmdd-hhmmss-xxxx (run directories of dlrun before job numbers).
bool time_stamped(const std::string& name) {
  if (name.size() != 20 || name[8] != '-' || name[15] != '-') return false;
  for (size_t i = 0; i < name.size(); ++i) {
    if (i == 8 || i == 15) continue;
    if (!std::isxdigit(static_cast<unsigned char>(name[i]))) return false;
  }
  return true;
}

}  // namespace

RetentionSettings parse_retention_settings(std::string_view text, const std::string& path) {
  RetentionSettings settings;
  const toml::table root = parse_config(text, path);
  const toml::table* table = config_table(root, path, "retention");
  if (!table) return settings;
  for (const auto& [key, value] : *table) {
    const std::string name(key.str());
    auto number = value.value<double>();
    if (!number || !(value.is_integer() || value.is_floating_point())) {
      config_error(path, value.source(), fmt::format("'{}' must be a number", name));
    }
    if (name == "days") {
      if (!(*number >= 0 && *number <= 36500))
        config_error(path, value.source(), "'days' must be from 0 (never) to 36500");
      settings.days = *number;
    } else if (name == "keep") {
      if (!value.is_integer() || *number < 0 || *number > 1e6) {
        config_error(path, value.source(), "'keep' must be a whole number of jobs, 0 or more");
      }
      settings.keep = static_cast<int>(*number);
    } else {
      config_error(path, key.source(),
                   fmt::format("unknown key '{}' in [retention] (known: days, keep)", name));
    }
  }
  return settings;
}

RetentionSettings read_retention_settings(const std::string& home_dir) {
  const std::string path = home_dir + "/config.toml";
  auto text = read_file(path);
  return text ? parse_retention_settings(*text, path) : RetentionSettings{};
}

CleanReport clean_run_dirs(JobQueue& queue, const RetentionSettings& settings, double now,
                           const std::vector<int64_t>& only, bool dry_run) {
  std::vector<JobRecord> chosen;
  if (!only.empty()) {
    for (int64_t id : only) {
      auto job = queue.store().get(id);
      if (!job)
        throw ConfigError(fmt::format("no job {} (dlrun status --all lists every job)", id));
      check_owner(*job, "clean");
      if (!is_terminal(job->state)) {
        throw ConfigError(fmt::format("job {} is {}: only an ended job's run directory is removed",
                                      id, to_string(job->state)));
      }
      chosen.push_back(*job);
    }
  } else if (settings.days > 0) {
    const uid_t me = ::geteuid();
    for (auto& job : queue.store().ended_before(now - settings.days * k_day, settings.keep)) {
      if (job.submitted.owner_uid < 0 || static_cast<uid_t>(job.submitted.owner_uid) == me)
        chosen.push_back(job);
    }
  }
  const fs::path home = fs::absolute(queue.home());
  std::set<int64_t> chosen_ids;
  for (const auto& job : chosen) chosen_ids.insert(job.id);
  // Run directories of the jobs that stay, and their checkpoints: which job uses each, and how.
  std::map<std::string, std::string> in_use;
  for (const auto& job : queue.store().list(true, 0)) {
    if (!chosen_ids.count(job.id) && !job.run_dir.empty())
      in_use.emplace(plain_path(job.run_dir), fmt::format("job {} runs in it", job.id));
  }
  // A job queued by dlrun submit --resume keeps its checkpoints in the resumed job's run
  // directory: cleaning that one removed them under a running job.
  for (const auto& [id, blob] : queue.store().environments_holding(std::string(env::k_resumed_checkpoint_dir) + "=")) {
    if (chosen_ids.count(id)) continue;
    const Environment env = decode_environment(blob);
    if (auto it = env.find(env::k_resumed_checkpoint_dir); it != env.end() && !it->second.empty())
      in_use.emplace(plain_path(it->second),
                     fmt::format("job {} goes on from its checkpoints (dlrun submit --resume)", id));
  }
  CleanReport report;
  std::error_code ec;
  for (const auto& job : chosen) {
    bool removed = false;
    const fs::path link = home / "runs" / std::to_string(job.id);
    if (fs::is_symlink(link, ec)) {
      remove_path(link, dry_run, report);
      removed = true;
    }
    // A job cancelled before it started has no run directory.
    if (job.run_dir.empty()) {
      if (removed) report.jobs.push_back(job.id);
      continue;
    }
    // Only a run directory dlrun made ($DLRUN_HOME/runs/NAME for dlrun local and run,
    // $DLRUN_HOME/jobs/ID for a submitted job), and none that holds another job's (a --run-dir
    // of $DLRUN_HOME/runs itself took every job's with it).
    const fs::path dir = plain_path(job.run_dir);
    const auto holder = std::find_if(in_use.begin(), in_use.end(), [&](const auto& other) {
      return other.first == dir.string() || inside(fs::path(other.first), dir);
    });
    const bool holds_another = holder != in_use.end();
    if (holds_another && !only.empty()) report.kept.emplace_back(dir.string(), holder->second);
    const fs::path parent = dir.parent_path();
    const bool dlrun_made = parent == fs::path(plain_path((home / "runs").string())) ||
                            parent == fs::path(plain_path((home / "jobs").string()));
    if (dlrun_made && !holds_another && fs::is_directory(dir, ec) &&
        !fs::is_symlink(dir, ec)) {
      remove_path(dir, dry_run, report);
      removed = true;
    }
    if (removed) report.jobs.push_back(job.id);
  }
  if (only.empty() && settings.days > 0) {
    // Run directories of dlrun before job numbers, by their age.
    for (auto it = fs::directory_iterator(home / "runs", ec); !ec && it != fs::directory_iterator();
         it.increment(ec)) {
      const std::string name = it->path().filename().string();
      struct stat st {};
      if (!time_stamped(name) || ::lstat(it->path().c_str(), &st) != 0) continue;
      if (static_cast<double>(st.st_mtime) < now - settings.days * k_day)
        remove_path(it->path(), dry_run, report);
    }
  }
  return report;
}

bool retention_due(const std::string& home_dir) {
  struct stat st {};
  if (::stat((home_dir + "/" + k_stamp).c_str(), &st) != 0) {
    mark_retention_started(home_dir);  // a new home: the first clean is a day from now
    return false;
  }
  return static_cast<double>(std::time(nullptr)) - static_cast<double>(st.st_mtime) >= k_day;
}

void mark_retention_started(const std::string& home_dir) {
  const std::string path = home_dir + "/" + k_stamp;
  int fd = ::open(path.c_str(), O_WRONLY | O_CREAT | O_CLOEXEC, 0600);
  if (fd >= 0) ::close(fd);
  ::utimensat(AT_FDCWD, path.c_str(), nullptr, 0);
}

}  // namespace dlrun::launcher
