#pragma once
// The machine's allocation history as a picture (issue 19): which job held which GPU when,
// from the allocation changes the goodput scheduler records. Two renderings of one summary:
//
//   render_trace_text()  one row per GPU, one character per time column, for a terminal:
//                          GPU 0 |AAAAAAAAAABBBB....|
//   render_trace_svg()   a self-contained SVG for a browser: a rectangle per GPU and holding
//                        interval of a job, a colour per job, tooltips with the cause.
//
// An event says what a job holds from its time on, until the job's next event: ranks 0 means
// it released everything. Events come in time order (ties allowed; a stable sort puts them in
// order otherwise). A job still holding GPUs after its last event holds them until `now`
// (until the end of the window when `now` is 0). Everything is clipped to the window.
// Pure, deterministic, thread-safe.

#include <cstddef>
#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "dlrun/launcher/allocation_event.hpp"

namespace dlrun::launcher {

struct TraceOptions {
  int gpus = 0;  // the machine's GPU count (rows); if 0, derive from the highest GPU index seen + 1
  // Time window; 0 = from the first event / to `now` (to the last event when `now` is 0).
  double begin = 0, end = 0;
  double now = 0;  // jobs still holding GPUs at the last event hold them until `now`
  int width = 72;  // text: columns of the time axis
};

// One job as the window shows it.
struct TraceJob {
  int64_t job = 0;
  std::string name;        // the latest non-empty name its events gave
  double gpu_seconds = 0;  // GPUs held × seconds, within the window
  // Unix seconds, within the window: when it first held ranks (its first event there if it
  // held none), and when it last gave them back or held them to (`now`, the window's end).
  double first = 0, last = 0;
  int peak_gpus = 0;     // the most GPUs it held at once
  bool running = false;  // still holds ranks after its last event
};

// One job holding one GPU without a break.
struct TraceSpan {
  size_t row = 0;           // index into TraceSummary::rows
  size_t job = 0;           // index into TraceSummary::jobs
  double from = 0, to = 0;  // Unix seconds, within the window, from < to
  size_t got = 0;           // index (into the events) of the event that gave the job this GPU
  std::optional<size_t> released;  // the event that took it back; none: held until `now`
};

struct TraceSummary {
  double begin = 0, end = 0;      // the window
  std::vector<std::string> rows;  // GPU ids: "0" … gpus−1, then any other id the events name
  std::vector<TraceJob> jobs;     // the jobs that held GPUs in the window, by first appearance
  size_t cpu_only_jobs = 0;       // jobs that ran in the window on CPU slots only (not in jobs)
  std::vector<TraceSpan> spans;   // by row, then time
  double busy_gpu_seconds = 0;    // time a GPU was held by some job, summed over the rows
  double utilisation = 0;         // busy / (rows × window); 0 for an empty window or no rows
  double makespan = 0;  // from the first job's first to the last job's last, in the window
};

TraceSummary summarise_trace(const std::vector<AllocationEvent>& events,
                             const TraceOptions& options);

// The character of the job at `job_index` (order of first appearance): A–Z, a–z, 0–9, then '#'.
char trace_symbol(size_t job_index);

// A terminal picture, no colour codes: the summary line, a row per GPU of options.width
// columns (each the character of the job that held the GPU for most of that column, '.' when
// idle held it most), the time axis (seconds from the window's begin), and a line per job.
std::string render_trace_text(const std::vector<AllocationEvent>& events,
                              const TraceOptions& options);

// A self-contained SVG document (900 px wide): title with the utilisation, GPU rows over a
// time axis with round ticks, a rectangle with a tooltip per TraceSpan, a legend of the jobs.
std::string render_trace_svg(const std::vector<AllocationEvent>& events,
                             const TraceOptions& options);

}  // namespace dlrun::launcher
