// `dlrun status [JOB]`: list jobs like squeue, or show one.

#include <cerrno>
#include <cstring>
#include <fstream>
#include <iostream>
#include <memory>

#include <fmt/format.h>

#include "commands.hpp"
#include "dlrun/error.hpp"
#include "dlrun/launcher/allocation_trace.hpp"
#include "dlrun/launcher/job_queue.hpp"
#include "dlrun/launcher/job_ref.hpp"
#include "dlrun/launcher/job_report.hpp"
#include "dlrun/launcher/process.hpp"
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
  std::ofstream file(args.svg, std::ios::binary | std::ios::trunc);
  file << launcher::render_trace_svg(events, options);
  file.close();
  if (!file) throw ConfigError(fmt::format("--svg {}: cannot write it: {}", args.svg, std::strerror(errno)));
  const auto summary = launcher::summarise_trace(events, options);
  std::cout << fmt::format("Wrote {}: {} job{} on {} GPU{}, utilisation {:.1f}%\n", args.svg, summary.jobs.size(),
                           summary.jobs.size() == 1 ? "" : "s", summary.rows.size(), summary.rows.size() == 1 ? "" : "s",
                           100 * summary.utilisation);
  return 0;
}

int run_status(const StatusArgs& args, const CLI::App& app) {
  launcher::JobQueue queue(launcher::current_environment());
  queue.sweep();
  if (args.trace || !args.svg.empty()) {
    if (app.count("JOB") || args.json) throw ConfigError("--trace and --svg draw the whole machine: no JOB, no --json");
    return print_trace(queue, args);
  }
  double now = launcher::now_seconds();
  if (app.count("JOB")) {
    auto job = queue.store().get(launcher::submitted_job_number(launcher::parse_job_ref(args.job), "status"));
    if (!job) throw ConfigError(fmt::format("no job {} (dlrun status --all lists every job)", args.job));
    const auto policy = launcher::is_terminal(job->state) ? launcher::PolicyViews{} : queue.policy_view(now);
    std::cout << (args.json ? launcher::job_json(*job, now, policy) + "\n"
                            : launcher::status_details(*job, now, policy));
    return launcher::status_exit_code(job->state);
  }
  auto jobs = queue.store().list(args.all, args.recent);
  const auto policy = queue.policy_view(now, &jobs);  // a listing holds every active job
  if (args.json) {
    std::cout << launcher::jobs_json(jobs, now, policy) << "\n";
  } else {
    std::cout << launcher::render_table(launcher::status_rows(jobs, now, policy));
  }
  return 0;
}

}  // namespace

Command add_status_command(CLI::App& dlrun) {
  auto args = std::make_shared<StatusArgs>();
  CLI::App* app = dlrun.add_subcommand("status", "List jobs (pending, running and the last finished), or show one job");
  app->add_option("JOB", args->job, "Show this job in detail");
  app->add_flag("--json", args->json, "Print JSON (an array, or one object with JOB)");
  app->add_flag("-a,--all", args->all, "List every job in the history");
  app->add_option("--recent", args->recent, "How many finished jobs to list")->capture_default_str();
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
  app->footer(
      "With JOB, the exit code tells the job's state: 0 SUCCEEDED, 1 FAILED, 3 CANCELLED, 4 PENDING, "
      "5 RUNNING or RESCALING, 2 no such job.");
  return {app, [args, app](const Trailing&) { return run_status(*args, *app); }};
}

}  // namespace dlrun::cli
