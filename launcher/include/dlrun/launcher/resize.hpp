#pragma once
// Changing the rank count of a running job (`dlrun resize JOB N`), the launcher's side of
// elastic training. The request travels as a file in the job's run directory plus a
// signal to its supervisor (signals::k_resize_request); the supervisor answers in another
// file. Written up in docs/elastic.md. The format functions are pure; the file functions
// write atomically (temporary file, rename). Thread-safe.

#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace dlrun::launcher {

struct ResizeRequest {
  int world_size = 0;
  std::vector<std::string> gpu_ids;  // the GPUs to use (submitted GPU jobs: the scheduler's choice)
};

std::string format_resize_request(const ResizeRequest& request);
std::optional<ResizeRequest> parse_resize_request(std::string_view text);

// Why `requested` ranks are not allowed for a job of MIN:MAX ranks, or empty.
std::string check_resize(int requested, int min_ranks, int max_ranks);

// RUN_DIR/resize.request and RUN_DIR/resize.result.
void write_resize_request(const std::string& run_dir, const ResizeRequest& request);
std::optional<ResizeRequest> take_resize_request(const std::string& run_dir);
void write_resize_result(const std::string& run_dir, const std::string& result);
std::optional<std::string> take_resize_result(const std::string& run_dir);

// Sends the request to the supervisor `pid` and waits up to `timeout_seconds` for its
// answer: "ok N" or "error: …". Throws Error when it does not answer.
std::string request_resize(const std::string& run_dir, int pid, const ResizeRequest& request, double timeout_seconds);

}  // namespace dlrun::launcher
