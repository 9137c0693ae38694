// `dlrun history JOB|RUN_DIR [--svg FILE]`: what AdaptiveBatch decided in a run (batch sizes,
// noise scale, goodput measured and predicted), and the run drawn as a picture.

#include <fmt/format.h>

#include <cerrno>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <memory>

#include "commands.hpp"
#include "dlrun/error.hpp"
#include "dlrun/launcher/job_queue.hpp"
#include "dlrun/launcher/job_ref.hpp"
#include "dlrun/launcher/process.hpp"
#include "dlrun/launcher/run_history.hpp"

namespace dlrun::cli {
namespace {

struct HistoryArgs {
  std::string what;
  std::string svg;
};

int run_history(const HistoryArgs& args) {
  std::string run_dir = args.what, title = args.what;
  std::error_code ec;
  // A path (it has a '/', or names a directory here) is a run directory; anything else a job.
  const bool path =
      args.what.find('/') != std::string::npos || std::filesystem::is_directory(args.what, ec);
  if (!path) {
    launcher::JobQueue queue(launcher::current_environment());
    const int64_t id =
        launcher::job_number(queue.store(), launcher::parse_job_ref(args.what), "history");
    auto job = queue.store().get(id);
    if (!job) throw ConfigError(fmt::format("no job {}", id));
    run_dir = job->run_dir;
    title =
        job->name.empty() ? fmt::format("job {}", id) : fmt::format("job {} ({})", id, job->name);
  }
  if (!std::filesystem::is_directory(run_dir, ec)) {
    throw ConfigError(
        path ? fmt::format("{}: no such directory", run_dir)
             : fmt::format("{}: its run directory {} is gone (dlrun clean removes old ones)", title,
                           run_dir));
  }
  const auto points = launcher::read_run_history(run_dir);
  if (points.empty()) {
    throw ConfigError(
        fmt::format("{}: {}/metrics.jsonl has no metrics: the program does not use "
                    "dlrun::AdaptiveBatch, or has not logged yet (docs/adaptive.md)",
                    title, run_dir));
  }
  const int replicas = points.back().replicas ? static_cast<int>(*points.back().replicas) : 0;
  std::cout << title << ": " << run_dir << "\n"
            << launcher::history_summary(points, launcher::predicted_goodput(run_dir, replicas));
  if (!args.svg.empty()) {
    std::ofstream file(args.svg, std::ios::binary | std::ios::trunc);
    file << launcher::render_history_svg(points,
                                         title + ": batch size, goodput and noise scale over time");
    file.close();
    if (!file)
      throw ConfigError(
          fmt::format("--svg {}: cannot write it: {}", args.svg, std::strerror(errno)));
    std::cout << "Wrote " << args.svg << "\n";
  }
  return 0;
}

}  // namespace

Command add_history_command(CLI::App& dlrun) {
  auto args = std::make_shared<HistoryArgs>();
  CLI::App* app = dlrun.add_subcommand(
      "history",
      "What a run's adaptive batch decided (batch sizes, noise scale, goodput), and its picture");
  app->add_option("JOB", args->what, "A job's number or name, or a run directory")->required();
  app->add_option("--svg", args->svg,
                  "Also draw batch size, goodput and noise scale over time, as an SVG file")
      ->type_name("FILE");
  app->footer("Exit codes: 0 the history is printed (and drawn); 2 no such job or run directory, no metrics yet, "
              "or the SVG file cannot be written (docs/exit-codes.md).");
  return {app, [args](const Trailing&) { return run_history(*args); }};
}

}  // namespace dlrun::cli
