#pragma once
// Changing the rank count of a running job (`dlrun resize JOB N`), the launcher's side of
// elastic training. The request travels as a file in the job's run directory plus a
// signal to its supervisor (signals::k_resize_request); the supervisor answers in another
// file. Written up in docs/elastic.md. The format functions are pure; the file functions
// write atomically (temporary file, rename). Thread-safe.

#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace dlrun::launcher {

// What the supervisor does when the job's ranks have not said that they handle the stop
// request (RUN_DIR/handles-stop, see handles_stop() in run_dir.hpp): a stop request would end
// them (SIGUSR1's default action), and they would restart from their last checkpoint, if any.
enum class Unannounced {
  refuse,   // answer "refused: …" and leave the ranks running (dlrun resize, the scheduler)
  restart,  // stop them (SIGTERM, SIGKILL after the grace period) and restart them at the new size
};

struct ResizeRequest {
  int world_size = 0;
  std::vector<std::string> gpu_ids;  // the GPUs to use (submitted GPU jobs: the scheduler's choice)
  Unannounced unannounced = Unannounced::refuse;  // `dlrun resize --force`: restart
};

// The supervisor's answers (RUN_DIR/resize.result): "ok N" (the ranks stopped at a step they
// agreed on and run N now), "ok N restarted" (they were stopped and restarted: Unannounced::
// restart), "ok N killed" (asked to stop at a step, they had not within the grace period: they
// were killed, and restarted from their last checkpoint), "refused: WHY" (they have not said
// that they handle the stop request; nothing was done), "error: WHY".
inline constexpr const char* k_resize_restarted = "restarted";
inline constexpr const char* k_resize_killed = "killed";
inline constexpr const char* k_resize_refused = "refused: ";

std::string format_resize_request(const ResizeRequest& request);
std::optional<ResizeRequest> parse_resize_request(std::string_view text);

// Why `requested` ranks are not allowed for a job of MIN:MAX ranks, or empty.
std::string check_resize(int requested, int min_ranks, int max_ranks);

// RUN_DIR/resize.request and RUN_DIR/resize.result.
void write_resize_request(const std::string& run_dir, const ResizeRequest& request);
std::optional<ResizeRequest> take_resize_request(const std::string& run_dir);
// Whether RUN_DIR/resize.request exists: a SIGUSR2 without one is not dlrun resize's.
bool resize_requested(const std::string& run_dir);
void write_resize_result(const std::string& run_dir, const std::string& result);
std::optional<std::string> take_resize_result(const std::string& run_dir);

// One requester at a time per job: RUN_DIR/resize.lock, held (flock) from before a submitted
// job's store records a grow's GPUs until the outcome is recorded. So a store whose allocation
// differs from the one its ranks run at, while nobody holds the lock and the supervisor has no
// request, records a resize whose requester died between the two (killed scheduler, Ctrl-C):
// the supervisor puts its own allocation back (job_runner.cpp). The lock goes with the process.
class ResizeLock {
 public:
  // Waits for another requester's turn to end.
  static std::unique_ptr<ResizeLock> wait(const std::string& run_dir);
  // nullptr when another process holds it. (An empty RUN_DIR, or a lock file this process
  // cannot open: a lock that holds nothing, held() false.)
  static std::unique_ptr<ResizeLock> try_take(const std::string& run_dir);
  // try_take for up to `seconds`; nullptr when another process held it all that time.
  static std::unique_ptr<ResizeLock> wait_for(const std::string& run_dir, double seconds);
  bool held() const { return m_fd >= 0; }
  ~ResizeLock();
  ResizeLock(const ResizeLock&) = delete;
  ResizeLock& operator=(const ResizeLock&) = delete;
  const std::string& run_dir() const { return m_run_dir; }

 private:
  ResizeLock(std::string run_dir, int fd) : m_run_dir(std::move(run_dir)), m_fd(fd) {}
  std::string m_run_dir;
  int m_fd;
};

// Sends the request to the supervisor `pid` and waits up to `timeout_seconds` for its
// answer (above). Throws Error when it does not answer. Requests to one job take turns
// (ResizeLock): each gets its own answer. The first form takes the lock for the request.
std::string request_resize(const std::string& run_dir, int pid, const ResizeRequest& request, double timeout_seconds);
std::string request_resize(const ResizeLock& held, int pid, const ResizeRequest& request, double timeout_seconds);

}  // namespace dlrun::launcher
