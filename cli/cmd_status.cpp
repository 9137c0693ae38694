// `dlrun status [JOB]`: list jobs like squeue, or show one.

#include <iostream>
#include <memory>

#include <fmt/format.h>

#include "commands.hpp"
#include "dlrun/error.hpp"
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
};

int run_status(const StatusArgs& args, const CLI::App& app) {
  launcher::JobQueue queue(launcher::current_environment());
  queue.sweep();
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
  app->footer(
      "With JOB, the exit code tells the job's state: 0 SUCCEEDED, 1 FAILED, 3 CANCELLED, 4 PENDING, "
      "5 RUNNING or RESCALING, 2 no such job.");
  return {app, [args, app](const Trailing&) { return run_status(*args, *app); }};
}

}  // namespace dlrun::cli
