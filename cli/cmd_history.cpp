// `dlrun history JOB|RUN_DIR [--svg FILE]`: what AdaptiveBatch decided in a run (batch sizes,
// noise scale, goodput measured and predicted), and the run drawn as a picture.

#include <fmt/format.h>

#include <filesystem>
#include <iostream>
#include <memory>
#include <optional>
#include <tuple>
#include <utility>

#include "commands.hpp"
#include "dlrun/error.hpp"
#include "dlrun/launcher/job_queue.hpp"
#include "dlrun/launcher/job_store.hpp"
#include "dlrun/launcher/job_ref.hpp"
#include "dlrun/launcher/process.hpp"
#include "dlrun/launcher/run_dir.hpp"
#include "dlrun/launcher/run_history.hpp"

namespace dlrun::cli {
namespace {

struct HistoryArgs {
  std::string what;
  std::string svg;
};

// The job `what` names, if any (a name with a '/' never names one): its run directory and a
// title. A name that is also a directory here, other than that job's run directory, is
// ambiguous: the user says which.
std::optional<std::pair<std::string, std::string>> find_job(const std::string& what) {
  std::error_code ec;
  const bool directory = std::filesystem::is_directory(what, ec);
  const launcher::Environment env = launcher::current_environment();
  // A directory here, with no job store yet: no job can have its name (nor is a store made).
  if (directory && !std::filesystem::exists(launcher::dlrun_home(env) + "/jobs.db", ec))
    return std::nullopt;
  std::optional<launcher::JobRecord> job;
  int64_t id = 0;
  try {
    launcher::JobQueue queue(env);
    id = launcher::job_number(queue.store(), launcher::parse_job_ref(what), "history");
    job = queue.store().get(id);
  } catch (const std::exception&) {
    if (directory) return std::nullopt;  // no such job (or no store to ask): the directory
    throw;
  }
  if (!job) {
    if (directory) return std::nullopt;
    throw ConfigError(fmt::format("no job {}", id));
  }
  const std::string title =
      job->name.empty() ? fmt::format("job {}", id) : fmt::format("job {} ({})", id, job->name);
  if (job->run_dir.empty()) {
    throw ConfigError(
        launcher::is_terminal(job->state)
            ? fmt::format("{} ended ({}) before it started: it has no run directory, nor metrics",
                          title, launcher::to_string(job->state))
            : fmt::format("{} has not started yet: it has no run directory, nor metrics "
                          "(dlrun status {})",
                          title, id));
  }
  if (directory && !std::filesystem::equivalent(what, job->run_dir, ec)) {
    throw ConfigError(fmt::format("'{}' is both {} and a directory here: write ./{} for the "
                                  "directory, or the job's number",
                                  what, title, what));
  }
  return std::make_pair(job->run_dir, title);
}

int run_history(const HistoryArgs& args) {
  std::string run_dir = args.what, title = args.what;
  std::error_code ec;
  // A path (it has a '/') is a run directory; anything else a job, or else a directory here.
  const bool path = args.what.find('/') != std::string::npos;
  const auto job = path ? std::nullopt : find_job(args.what);
  if (job) std::tie(run_dir, title) = *job;
  if (!std::filesystem::is_directory(run_dir, ec)) {
    throw ConfigError(
        !job ? fmt::format("{}: no such directory", run_dir)
             : fmt::format("{}: its run directory {} is gone (dlrun clean removes old ones)", title,
                           run_dir));
  }
  const auto points = launcher::read_run_history(run_dir);
  if (points.empty()) {
    const bool exists = std::filesystem::exists(std::filesystem::path(run_dir) / "metrics.jsonl", ec);
    throw ConfigError(
        fmt::format("{}: {}/metrics.jsonl {}: the program does not use an adaptive batch (C++ "
                    "dlrun::AdaptiveBatch, Python dlrun.AdaptiveDataLoader), or has not logged yet (docs/adaptive.md)",
                    title, run_dir, exists ? "has no metrics" : "does not exist"));
  }
  const int replicas = points.back().replicas ? static_cast<int>(*points.back().replicas) : 0;
  if (!args.svg.empty()) {
    // Whole or not at all: a failed write leaves an earlier picture there as it was. Written
    // first: a path that cannot be written is the error, without the history printed before it.
    write_svg(args.svg, launcher::render_history_svg(
                            points, title + ": batch size, goodput and noise scale over time"));
  }
  std::cout << title << ": " << run_dir << "\n"
            << launcher::history_summary(points, launcher::predicted_goodput(run_dir, replicas));
  if (!args.svg.empty()) std::cout << "Wrote " << args.svg << "\n";
  return 0;
}

}  // namespace

Command add_history_command(CLI::App& dlrun) {
  auto args = std::make_shared<HistoryArgs>();
  CLI::App* app = dlrun.add_subcommand(
      "history",
      "What a run's adaptive batch decided (batch sizes, noise scale, goodput), and its picture");
  app->add_option("JOB", args->what,
                  "A job's number or name, or a run directory (a path with a '/', or a "
                  "directory here that names no job)")->required();
  app->add_option("--svg", args->svg,
                  "Also draw batch size, goodput and noise scale over time, as an SVG file")
      ->type_name("FILE");
  app->footer("Exit codes: 0 the history is printed (and drawn); 2 no such job or run directory, no metrics yet, "
              "or the SVG file cannot be written (docs/exit-codes.md).");
  return {app, [args](const Trailing&) { return run_history(*args); }};
}

}  // namespace dlrun::cli
