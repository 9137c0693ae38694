#include "dlrun/launcher/job_logs.hpp"

#include <algorithm>
#include <chrono>
#include <filesystem>
#include <fstream>
#include <functional>
#include <sstream>
#include <thread>

#include <fmt/format.h>

#include "dlrun/error.hpp"
#include "dlrun/log.hpp"
#include "dlrun/launcher/carriage_return.hpp"
#include "dlrun/launcher/job_queue.hpp"
#include "dlrun/launcher/run_dir.hpp"
#include "dlrun/launcher/text.hpp"

namespace fs = std::filesystem;

namespace dlrun::launcher {
namespace {

constexpr auto k_poll = std::chrono::milliseconds(100);
constexpr int k_polls_per_sweep = 10;  // a lost supervisor is noticed within a second
constexpr std::streamoff k_tail_bytes = 65536;
constexpr size_t k_cut_line_bytes = 4096;  // of a last line longer than the tail read

// Copies what `path` has beyond `offset` to `out`; returns the new offset.
std::streamoff copy_new(const std::string& path, std::streamoff offset, std::ostream& out) {
  std::ifstream file(path, std::ios::binary);
  if (!file) return offset;
  file.seekg(offset);
  char buffer[65536];
  while (file.read(buffer, sizeof buffer) || file.gcount() > 0) {
    out.write(buffer, file.gcount());
    offset += file.gcount();
  }
  out.flush();
  return offset;
}

// Complete lines of several logs, each prefixed ("[R] "), as they grow: a foreground job's
// output, which went to its terminal, is in its members' logs only.
class PrefixedLogs {
 public:
  void add(std::string path, std::string prefix) { m_logs.push_back({std::move(path), std::move(prefix), 0, {}}); }
  // Copies what each log has gained; `flush` also its last line without a newline.
  void copy(std::ostream& out, bool flush) {
    for (auto& log : m_logs) {
      std::ostringstream fresh;
      log.offset = copy_new(log.path, log.offset, fresh);
      log.partial += fresh.str();
      size_t start = 0;
      for (size_t end; (end = log.partial.find('\n', start)) != std::string::npos; start = end + 1) {
        out << log.prefix << std::string_view(log.partial).substr(start, end + 1 - start);
      }
      log.partial.erase(0, start);
      if (flush && !log.partial.empty()) {
        out << log.prefix << log.partial << "\n";
        log.partial.clear();
      }
    }
    out.flush();
  }

 private:
  struct Log {
    std::string path, prefix;
    std::streamoff offset;
    std::string partial;
  };
  std::vector<Log> m_logs;
};

// rank-N.log of each rank a dlrun local job may have had, prefixed as dlrun local prefixes by
// default; node-N.log of each host of a dlrun run job, whose lines its agents prefixed.
PrefixedLogs foreground_logs(const JobRecord& job) {
  PrefixedLogs logs;
  const int ranks = std::max({job.allocation.ranks, job.submitted.request.max_ranks, 1});
  if (job.submitted.origin == JobOrigin::local) {
    for (int rank = 0; rank < ranks; ++rank) logs.add(rank_log_path(job.run_dir, rank), fmt::format("[{}] ", rank));
    return logs;
  }
  std::vector<int> nodes;
  std::error_code ec;
  for (auto it = fs::directory_iterator(job.run_dir, ec); !ec && it != fs::directory_iterator(); it.increment(ec)) {
    const std::string name = it->path().filename().string();
    if (name.rfind("node-", 0) == 0 && name.size() > 9 && name.compare(name.size() - 4, 4, ".log") == 0) {
      if (auto n = parse_int(name.substr(5, name.size() - 9))) nodes.push_back(static_cast<int>(*n));
    }
  }
  std::sort(nodes.begin(), nodes.end());
  for (int node : nodes) logs.add(fmt::format("{}/node-{}.log", job.run_dir, node), "");
  return logs;
}

// A started job's logs are in `dir` (its run directory, or its job file's log_dir): say so when
// they were removed, rather than print nothing.
void require_logs(const JobRecord& job, const std::string& dir) {
  std::error_code ec;
  if (fs::is_directory(dir, ec)) return;
  throw ConfigError(fmt::format("job {}: its {} {} is gone (dlrun clean removes old ones)", job.id,
                                dir == job.run_dir ? "run directory" : "log directory", dir));
}

// The end of a followed job, on stderr, where it did not succeed: a log that just stops read as
// a success (a lost job's log says nothing of its end).
void say_end(const JobRecord& job) {
  if (job.state == JobState::succeeded) return;
  log::warn("job {} {}{}{}", job.id, to_string(job.state),
            job.exit_code ? fmt::format(" with exit code {}", *job.exit_code) : std::string(),
            job.reason.empty() ? std::string() : ": " + job.reason);
}

// Whether following should stop: what is written no longer reaches anyone.
bool gone(const std::ostream& out, const std::function<bool()>& reader_gone) {
  return !out || (reader_gone && reader_gone());
}

void follow_foreground(JobQueue& queue, const JobRecord& job, Follow follow, std::ostream& out,
                       const std::function<bool()>& reader_gone) {
  require_logs(job, job.run_dir);
  PrefixedLogs logs = foreground_logs(job);
  if (follow == Follow::no) {
    logs.copy(out, true);
    if (is_terminal(job.state)) say_end(job);
    return;
  }
  for (int polls = 1;; ++polls) {
    const auto now = queue.store().get(job.id);
    const bool ended = is_terminal(now->state);
    logs.copy(out, ended);
    if (ended) say_end(*now);
    if (ended || gone(out, reader_gone)) return;
    std::this_thread::sleep_for(k_poll);
    if (polls % k_polls_per_sweep == 0) queue.sweep();
  }
}

}  // namespace

void copy_job_log(JobQueue& queue, int64_t id, int rank, Follow follow, std::ostream& out,
                  const std::function<bool()>& reader_gone) {
  auto job = queue.store().get(id);
  if (!job) throw ConfigError(fmt::format("no job {} (dlrun status --all lists every job)", id));
  // The most ranks the job may have had: an elastic job that shrank keeps its larger ranks' logs,
  // and one that has not started has no allocation yet.
  const int ranks = std::max(job->allocation.ranks, job->submitted.request.max_ranks);
  if (rank >= 0 && ranks > 0 && rank >= ranks) {
    throw ConfigError(fmt::format("--rank {}: job {} has ranks 0 to {}", rank, id, ranks - 1));
  }
  const bool foreground = job->submitted.origin != JobOrigin::submit;
  // A dlrun local run keeps its terminal's lines in order in its output.log (runs of dlrun
  // before it, and dlrun run's, only their ranks' or hosts' logs).
  std::error_code exists_ec;
  if (foreground && rank < 0 && !fs::exists(job->run_dir + "/" + k_output_log, exists_ec)) {
    return follow_foreground(queue, *job, follow, out, reader_gone);
  }
  if (job->run_dir.empty() && is_terminal(job->state)) {
    // Nothing printed would read as an empty log.
    log::info("job {} is {} and never started: it has no output", id, to_string(job->state));
    return;
  }
  const std::string log_dir = queue.log_dir(*job);
  if (!job->run_dir.empty()) require_logs(*job, log_dir);
  const std::string path = rank >= 0 ? rank_log_path(log_dir, rank) : log_dir + "/output.log";
  std::error_code ec;
  // Ranks on other hosts (dlrun run, kinds ssh and slurm) keep their logs there.
  const bool here = job->submitted.origin != JobOrigin::run && !job->submitted.request.remote && !job->submitted.slurm;
  if (rank >= 0 && here && is_terminal(job->state) && !job->run_dir.empty() && !fs::exists(path, ec)) {
    // An elastic job that started, or stayed, below its MAX never ran its higher ranks.
    int ran = 0;
    while (fs::exists(rank_log_path(log_dir, ran), ec)) ++ran;
    throw ConfigError(ran == 0 ? fmt::format("--rank {}: job {} has no rank logs", rank, id)
                               : fmt::format("--rank {}: job {} ran ranks 0 to {} only", rank, id, ran - 1));
  }
  std::streamoff offset = copy_new(path, 0, out);
  if (follow == Follow::no) {
    // Nothing printed and nothing to wait for would read as an empty log.
    if (job->state == JobState::pending)
      log::info("job {} is PENDING: it has no output yet (dlrun logs -f {} waits for it)", id, id);
    // How it ended, when not well, as -f says it (on stderr: stdout is the log's).
    if (is_terminal(job->state)) say_end(*job);
    return;
  }
  // A wait with nothing printed read as a hang: said once, on stderr (stdout is the log's).
  if (job->state == JobState::pending) log::info("job {} is PENDING: waiting for it to start", id);
  for (int polls = 1;; ++polls) {
    job = queue.store().get(id);
    const bool ended = is_terminal(job->state);
    offset = copy_new(path, offset, out);
    if (ended && job->run_dir.empty()) {
      // Cancelled while it waited: nothing printed would read as an empty log.
      log::info("job {} is {} and never started: it has no output", id, to_string(job->state));
    } else if (ended) {
      say_end(*job);
    }
    if (ended || gone(out, reader_gone)) return;
    std::this_thread::sleep_for(k_poll);
    if (polls % k_polls_per_sweep == 0) queue.sweep();
  }
}

LogTail read_log_tail(const std::string& path, size_t count) {
  LogTail tail{path, {}, false};
  std::ifstream file(path, std::ios::binary | std::ios::ate);
  if (!file) return tail;
  tail.exists = true;
  const std::streamoff size = file.tellg();
  const std::streamoff start = std::max<std::streamoff>(0, size - k_tail_bytes);
  file.seekg(start);
  std::string text(static_cast<size_t>(size - start), '\0');
  file.read(text.data(), static_cast<std::streamsize>(text.size()));
  text.resize(static_cast<size_t>(file.gcount()));
  if (!text.empty() && text.back() == '\n') text.pop_back();
  if (text.empty()) return tail;
  // From the end back: `count` lines, not the first one when the tail began inside it, unless
  // that is all there is (a progress bar redrawn for megabytes without a newline, then a crash:
  // the log is not empty, and its last state is what matters).
  size_t end = text.size();
  while (tail.lines.size() < count) {
    const size_t newline = end == 0 ? std::string::npos : text.rfind('\n', end - 1);
    if (newline == std::string::npos) {
      if (start == 0) {
        tail.lines.push_back(text.substr(0, end));
      } else if (tail.lines.empty()) {
        const size_t from = end > k_cut_line_bytes ? end - k_cut_line_bytes : 0;
        tail.lines.push_back("…" + text.substr(from, end - from));
      }
      break;
    }
    tail.lines.push_back(text.substr(newline + 1, end - newline - 1));
    end = newline;
  }
  std::reverse(tail.lines.begin(), tail.lines.end());
  // A line that redraws itself shows as a terminal leaves it.
  for (auto& line : tail.lines) {
    if (line.find('\r') == std::string::npos) continue;
    if (const std::string_view shown = shown_segment(line); !shown.empty()) line = std::string(shown);
  }
  return tail;
}

}  // namespace dlrun::launcher
