#include "dlrun/launcher/resize.hpp"

#include <fcntl.h>
#include <signal.h>
#include <sys/file.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <cstdio>
#include <thread>

#include <fmt/format.h>

#include "dlrun/error.hpp"
#include "dlrun/launcher/fd_io.hpp"
#include "dlrun/launcher/text.hpp"
#include "dlrun/protocol.hpp"

namespace dlrun::launcher {
namespace {

std::optional<std::string> take(const std::string& path) {
  auto text = read_file(path);
  if (text) std::remove(path.c_str());
  return text;
}

}  // namespace

std::string format_resize_request(const ResizeRequest& request) {
  std::string ids;
  for (const auto& id : request.gpu_ids) ids += (ids.empty() ? "" : ",") + id;
  // A third line only when it says something: a supervisor of an older version reads two.
  return fmt::format("{}\n{}\n{}", request.world_size, ids,
                     request.unannounced == Unannounced::restart ? "restart\n" : "");
}

std::optional<ResizeRequest> parse_resize_request(std::string_view text) {
  auto lines = split(text, '\n');
  auto n = parse_int(trim(lines.at(0)));
  if (!n || *n < 1) return std::nullopt;
  ResizeRequest request{*n, {}};
  if (lines.size() > 1 && !trim(lines[1]).empty()) {
    for (const auto& id : split(trim(lines[1]), ',')) request.gpu_ids.push_back(id);
    if (static_cast<int>(request.gpu_ids.size()) != *n) return std::nullopt;
  }
  if (lines.size() > 2 && trim(lines[2]) == "restart") request.unannounced = Unannounced::restart;
  return request;
}

std::string check_resize(int requested, int min_ranks, int max_ranks) {
  if (min_ranks == max_ranks) {
    return fmt::format("the job is not elastic: it was started with {} (start it with MIN:MAX to resize "
                       "it: dlrun local --nproc 1:4 or --gpus 1:4, or in job.toml's [resources] "
                       "nproc = \"1:4\" or gpus = \"1:4\")", counted(max_ranks, "rank"));
  }
  if (requested < min_ranks || requested > max_ranks) {
    return fmt::format("{} is outside the job's range {}:{}", counted(requested, "rank"), min_ranks, max_ranks);
  }
  return {};
}

void write_resize_request(const std::string& run_dir, const ResizeRequest& request) {
  write_file_atomically(run_dir + "/resize.request", format_resize_request(request));
}

std::optional<ResizeRequest> take_resize_request(const std::string& run_dir) {
  auto text = take(run_dir + "/resize.request");
  if (!text) return std::nullopt;
  return parse_resize_request(*text);
}

bool resize_requested(const std::string& run_dir) {
  return !run_dir.empty() && ::access((run_dir + "/resize.request").c_str(), F_OK) == 0;
}

void write_resize_result(const std::string& run_dir, const std::string& result) {
  write_file_atomically(run_dir + "/resize.result", result + "\n");
}

std::optional<std::string> take_resize_result(const std::string& run_dir) {
  auto text = take(run_dir + "/resize.result");
  if (!text) return std::nullopt;
  return std::string(trim(*text));
}

std::unique_ptr<ResizeLock> ResizeLock::wait(const std::string& run_dir) {
  // A lock that cannot be made (a run directory not ours to write) leaves the requests
  // untaken turns, as before there was one: the store's owner writes it.
  if (run_dir.empty()) return std::unique_ptr<ResizeLock>(new ResizeLock(run_dir, -1));
  const int fd = ::open((run_dir + "/resize.lock").c_str(), O_RDWR | O_CREAT | O_CLOEXEC, 0600);
  if (fd >= 0) {
    while (::flock(fd, LOCK_EX) != 0 && errno == EINTR) {
    }
  }
  return std::unique_ptr<ResizeLock>(new ResizeLock(run_dir, fd));
}

std::unique_ptr<ResizeLock> ResizeLock::try_take(const std::string& run_dir) {
  if (run_dir.empty()) return std::unique_ptr<ResizeLock>(new ResizeLock(run_dir, -1));
  const int fd = ::open((run_dir + "/resize.lock").c_str(), O_RDWR | O_CREAT | O_CLOEXEC, 0600);
  // Not ours to open (another user's store): nobody can hold it for us either.
  if (fd < 0) return std::unique_ptr<ResizeLock>(new ResizeLock(run_dir, -1));
  if (::flock(fd, LOCK_EX | LOCK_NB) != 0) {
    ::close(fd);
    return nullptr;
  }
  return std::unique_ptr<ResizeLock>(new ResizeLock(run_dir, fd));
}

ResizeLock::~ResizeLock() {
  if (m_fd >= 0) ::close(m_fd);
}

std::unique_ptr<ResizeLock> ResizeLock::wait_for(const std::string& run_dir, double seconds) {
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::duration<double>(seconds);
  while (true) {
    if (auto lock = try_take(run_dir)) return lock;
    if (std::chrono::steady_clock::now() >= deadline) return nullptr;
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
  }
}

std::string request_resize(const std::string& run_dir, int pid, const ResizeRequest& request, double timeout_seconds) {
  // One request and one answer at a time: the files are the job's, and two clients at once took
  // each other's answer or overwrote each other's request (one waited out its timeout).
  return request_resize(*ResizeLock::wait(run_dir), pid, request, timeout_seconds);
}

std::string request_resize(const ResizeLock& held, int pid, const ResizeRequest& request, double timeout_seconds) {
  const std::string& run_dir = held.run_dir();
  take_resize_result(run_dir);  // an old answer is not this one's
  write_resize_request(run_dir, request);
  if (::kill(pid, signals::k_resize_request) != 0) {
    throw Error(fmt::format("the job's supervisor (pid {}) is gone: {}", pid, std::strerror(errno)));
  }
  auto deadline = std::chrono::steady_clock::now() + std::chrono::duration<double>(timeout_seconds);
  while (std::chrono::steady_clock::now() < deadline) {
    if (auto result = take_resize_result(run_dir)) return *result;
    if (::kill(pid, 0) != 0 && errno == ESRCH) {
      if (auto result = take_resize_result(run_dir)) return *result;
      throw Error(fmt::format("the job's supervisor (pid {}) ended without answering (the job ended?)", pid));
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  throw Error(fmt::format("no answer from the job's supervisor (pid {}) within {:g} s", pid, timeout_seconds));
}

}  // namespace dlrun::launcher
