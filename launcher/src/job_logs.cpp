#include "dlrun/launcher/job_logs.hpp"

#include <algorithm>
#include <chrono>
#include <fstream>
#include <thread>

#include <fmt/format.h>

#include "dlrun/error.hpp"
#include "dlrun/launcher/job_queue.hpp"
#include "dlrun/launcher/run_dir.hpp"

namespace dlrun::launcher {
namespace {

constexpr auto k_poll = std::chrono::milliseconds(100);
constexpr int k_polls_per_sweep = 10;  // a lost supervisor is noticed within a second
constexpr std::streamoff k_tail_bytes = 65536;

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

}  // namespace

void copy_job_log(JobQueue& queue, int64_t id, int rank, Follow follow, std::ostream& out) {
  auto job = queue.store().get(id);
  if (!job) throw ConfigError(fmt::format("no job {} (dlrun status --all lists every job)", id));
  if (rank >= 0 && job->allocation.ranks > 0 && rank >= job->allocation.ranks) {
    throw ConfigError(fmt::format("--rank {}: job {} has ranks 0 to {}", rank, id, job->allocation.ranks - 1));
  }
  std::string log_dir = queue.run_dir(id);
  try {
    log_dir = queue.log_dir(id, submitted_spec(*job));
  } catch (const ConfigError&) {
    // A file that no longer parses never ran: its supervisor wrote why in the run directory.
  }
  const std::string path = rank >= 0 ? rank_log_path(log_dir, rank) : log_dir + "/output.log";
  std::streamoff offset = copy_new(path, 0, out);
  if (follow == Follow::no) return;
  for (int polls = 1;; ++polls) {
    job = queue.store().get(id);
    const bool ended = is_terminal(job->state);
    offset = copy_new(path, offset, out);
    if (ended) return;
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
  // From the end back: `count` lines, not the first one when the tail began inside it.
  size_t end = text.size();
  while (tail.lines.size() < count) {
    const size_t newline = end == 0 ? std::string::npos : text.rfind('\n', end - 1);
    if (newline == std::string::npos) {
      if (start == 0) tail.lines.push_back(text.substr(0, end));
      break;
    }
    tail.lines.push_back(text.substr(newline + 1, end - newline - 1));
    end = newline;
  }
  std::reverse(tail.lines.begin(), tail.lines.end());
  return tail;
}

}  // namespace dlrun::launcher
