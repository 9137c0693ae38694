// `dlrun status [JOB]`: list jobs like squeue, or show one.

#include <signal.h>
#include <unistd.h>

#include <cmath>
#include <ctime>
#include <iostream>
#include <memory>

#include <fmt/format.h>

#include "commands.hpp"
#include "dlrun/error.hpp"
#include "dlrun/launcher/allocation_trace.hpp"
#include "dlrun/launcher/duration_limit.hpp"
#include "dlrun/launcher/job_queue.hpp"
#include "dlrun/launcher/job_ref.hpp"
#include "dlrun/launcher/job_report.hpp"
#include "dlrun/launcher/process.hpp"
#include "dlrun/launcher/queue_insight.hpp"
#include "dlrun/launcher/time_stamp.hpp"
#include "dlrun/protocol.hpp"

namespace dlrun::cli {
namespace {

struct StatusArgs {
  std::string job;
  bool json = false;
  bool all = false;
  int recent = 10;
  bool trace = false;
  std::string svg;
  double since = 0;
  int width = 72;
  double watch = 0;  // seconds between redraws; 0: print once
};

// --trace / --svg: the machine's allocation history as a picture (docs/scheduling.md).
int print_trace(launcher::JobQueue& queue, const StatusArgs& args) {
  const double now = launcher::now_seconds();
  const double since = args.since > 0 ? now - args.since : 0;
  const auto events = queue.store().allocation_history(since);
  launcher::TraceOptions options;
  options.gpus = queue.capacity().gpus;
  options.begin = since;
  options.now = now;
  options.width = args.width;
  if (args.svg.empty()) {
    std::cout << launcher::render_trace_text(events, options);
    return 0;
  }
  write_svg(args.svg, launcher::render_trace_svg(events, options));
  const auto summary = launcher::summarise_trace(events, options);
  std::cout << fmt::format("Wrote {}: {} job{} on {} GPU{}, utilisation {:.1f}%\n", args.svg, summary.jobs.size(),
                           summary.jobs.size() == 1 ? "" : "s", summary.rows.size(), summary.rows.size() == 1 ? "" : "s",
                           100 * summary.utilisation);
  return 0;
}

// One listing (or JOB's details) as text, and the exit code it tells.
std::pair<std::string, int> render_status(launcher::JobQueue& queue, const StatusArgs& args, bool one_job) {
  const double now = launcher::now_seconds();
  if (one_job) {
    auto job = queue.store().get(launcher::job_number(queue.store(), launcher::parse_job_ref(args.job), "status",
                                                                launcher::NamedJob::active_first));
    if (!job) throw ConfigError(fmt::format("no job {} (dlrun status --all lists every job)", args.job));
    launcher::QueueInsight insight;
    if (!launcher::is_terminal(job->state)) insight = launcher::queue_insight(queue, now, queue.store().list(false, 0));
    std::string text = args.json ? launcher::job_json(*job, now, insight) + "\n"
                                 : launcher::status_details(*job, now, insight);
    return {text, launcher::status_exit_code(job->state)};
  }
  auto jobs = queue.store().list(args.all, args.recent);
  const auto insight = launcher::queue_insight(queue, now, jobs);  // a listing holds every active job
  if (args.json) return {launcher::jobs_json(jobs, now, insight) + "\n", 0};
  return {launcher::status_table(jobs, now, insight), 0};
}

// --watch: redraws until SIGINT, SIGTERM, SIGHUP or SIGQUIT, then exits 0, or until its reader is gone. On a terminal each redraw
// replaces the last; otherwise (a pipe, a file) they follow each other, each under its header.
int watch_status(launcher::JobQueue& queue, const StatusArgs& args, bool one_job) {
  ::signal(SIGPIPE, SIG_DFL);  // as watch(1): a reader that is gone (| head) ends it
  const sigset_t stop = launcher::stop_signal_set();
  ::sigprocmask(SIG_BLOCK, &stop, nullptr);
  const bool terminal = ::isatty(STDOUT_FILENO) == 1;
  const std::string command = one_job ? "dlrun status " + args.job : "dlrun status";
  for (bool first = true;; first = false) {
    if (!first) queue.sweep();
    const std::string text = render_status(queue, args, one_job).first;
    const std::string header = fmt::format("Every {:g}s: {}  {}\n\n", args.watch, command,
                                           launcher::local_iso8601(std::time(nullptr)));
    std::cout << (terminal ? "\x1b[H\x1b[2J" : first ? "" : "\n") << header << text << std::flush;
    double whole = 0;
    const double fraction = std::modf(args.watch, &whole);
    timespec timeout{static_cast<time_t>(whole), static_cast<long>(fraction * 1e9)};
    if (::sigtimedwait(&stop, nullptr, &timeout) > 0) return 0;
  }
}

int run_status(const StatusArgs& args, const CLI::App& app) {
  launcher::JobQueue queue(launcher::current_environment());
  queue.sweep();
  const bool one_job = app.count("JOB") > 0;
  const bool watching = app.count("--watch") > 0;
  // An option that would change nothing is refused, not ignored without a word.
  if (one_job && (args.all || app.count("--recent") > 0)) {
    throw ConfigError("--all and --recent choose the jobs of the listing: not with JOB");
  }
  if (!args.trace && args.svg.empty() && (app.count("--since") > 0 || app.count("--width") > 0)) {
    throw ConfigError("--since and --width shape the picture of --trace or --svg: give one of them");
  }
  if (!args.svg.empty() && app.count("--width") > 0) {
    throw ConfigError("--width is the columns of --trace's picture: the SVG has no columns");
  }
  if (args.trace || !args.svg.empty()) {
    if (one_job || args.json || watching) {
      throw ConfigError("--trace and --svg draw the whole machine: no JOB, no --json, no --watch");
    }
    return print_trace(queue, args);
  }
  if (watching) {
    if (args.json) throw ConfigError("--watch redraws the table for people: without --json");
    return watch_status(queue, args, one_job);
  }
  auto [text, code] = render_status(queue, args, one_job);
  std::cout << text;
  return code;
}

}  // namespace

Command add_status_command(CLI::App& dlrun) {
  auto args = std::make_shared<StatusArgs>();
  CLI::App* app = dlrun.add_subcommand("status", "List jobs (pending, running and the last finished), or show one job");
  app->add_option("JOB", args->job, "Show this job in detail");
  app->add_flag("--json", args->json, "Print JSON (an array, or one object with JOB)");
  app->add_flag("-a,--all", args->all, "List every job in the history");
  app->add_option("--recent", args->recent, "How many finished jobs to list")
      ->type_name("N")
      ->capture_default_str()
      ->check(CLI::NonNegativeNumber.description(""));
  app->add_flag("--trace", args->trace,
                "Draw which job held which GPU over time (every start, resize and end the queue recorded), "
                "one row per GPU, one letter per job");
  app->add_option("--svg", args->svg, "Write that picture as an SVG file a browser opens, to FILE")
      ->type_name("FILE");
  app->add_option("--since", args->since, "With --trace or --svg: only the last SECONDS")
      ->type_name("SECONDS")
      ->check(CLI::PositiveNumber);
  app->add_option("--width", args->width, "With --trace: columns of the time axis")
      ->capture_default_str()
      ->check(CLI::Range(10, 1000));
  app->add_option("--watch", args->watch,
                  "Redraw the listing (or JOB) every SECONDS (default 2) until Ctrl-C; exits 0. "
                  "On a terminal each redraw replaces the last; piped, they follow each other. Put JOB first: a "
                  "number right after --watch is its SECONDS")
      ->type_name("[SECONDS]")
      ->expected(0, 1)
      ->default_str("2")
      ->check(CLI::Validator(
          [](std::string& text) {
            double seconds = 0;
            if (!CLI::detail::lexical_cast(text, seconds)) {
              return fmt::format("'{}' is not a number of seconds (dlrun status JOB --watch SECONDS)", text);
            }
            if (auto problem = launcher::duration_problem(seconds, text)) return *problem;
            return seconds < 0.1 ? fmt::format("{} is too often: 0.1 seconds at least", text) : std::string();
          },
          "SECONDS"));
  app->footer(
      "Columns: EXIT is the job's exit code; RESTARTS counts restarts after a failure (they spend "
      "max_restarts) and those the ranks asked for (all exited 75), RESIZES restarts at another size; "
      "SAMPLES/S is smoothed over the last 30 s of "
      "metrics.jsonl; REASON says why a PENDING job waits, or why a job failed or was cancelled "
      "(docs/jobs.md). No colour, columns of steady width: fit for watch(1) too.\n"
      "With JOB, the exit code tells the job's state: 0 SUCCEEDED, 1 FAILED, 3 CANCELLED, 4 PENDING, "
      "5 RUNNING or RESCALING, 2 no such job.");
  return {app, [args, app](const Trailing&) { return run_status(*args, *app); }};
}

}  // namespace dlrun::cli
