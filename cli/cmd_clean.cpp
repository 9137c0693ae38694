// `dlrun clean [JOB…]`: remove old run directories (retention, run_retention.hpp).

#include <fmt/format.h>

#include <iostream>
#include <memory>
#include <vector>

#include "commands.hpp"
#include "dlrun/error.hpp"
#include "dlrun/launcher/job_queue.hpp"
#include "dlrun/launcher/job_ref.hpp"
#include "dlrun/launcher/process.hpp"
#include "dlrun/launcher/run_retention.hpp"

namespace dlrun::cli {
namespace {

struct CleanArgs {
  std::vector<std::string> jobs;
  double days = 0;
  int keep = 0;
  bool dry_run = false;
  bool automatic = false;
};

std::string size_text(uint64_t bytes) {
  if (bytes >= (1ull << 30))
    return fmt::format("{:.1f} GiB", static_cast<double>(bytes) / (1ull << 30));
  if (bytes >= (1ull << 20))
    return fmt::format("{:.1f} MiB", static_cast<double>(bytes) / (1ull << 20));
  return fmt::format("{:.1f} KiB", static_cast<double>(bytes) / 1024);
}

int run_clean(const CleanArgs& args, const CLI::App& app) {
  launcher::JobQueue queue(launcher::current_environment());
  auto settings = launcher::read_retention_settings(queue.home());
  // On the command line 0 days means every ended job (beyond --keep); in config.toml, never.
  if (app.count("--older-than")) settings.days = args.days > 0 ? args.days : 1e-9;
  if (app.count("--keep")) settings.keep = args.keep;
  std::vector<int64_t> only;
  for (const auto& job : args.jobs)
    only.push_back(launcher::job_number(queue.store(), launcher::parse_job_ref(job), "clean"));
  if (only.empty() && settings.days <= 0 && !args.automatic) {
    std::cout << "Nothing to do: retention by age is off (config.toml: [retention] days = 0); name "
                 "jobs, or give "
                 "--older-than DAYS\n";
    return 0;
  }
  const auto report =
      launcher::clean_run_dirs(queue, settings, launcher::now_seconds(), only, args.dry_run);
  if (args.automatic) return 0;
  const char* verb = args.dry_run ? "Would remove" : "Removed";
  for (const auto& [path, why] : report.kept) std::cout << fmt::format("Kept {}: {}\n", path, why);
  if (report.paths.empty()) {
    std::cout << "Nothing to remove\n";
    return 0;
  }
  std::string jobs;
  for (int64_t id : report.jobs) jobs += (jobs.empty() ? "" : ", ") + std::to_string(id);
  const size_t links = report.links;
  const size_t dirs = report.paths.size() - links;
  std::string what = fmt::format("{} run director{}", dirs, dirs == 1 ? "y" : "ies");
  if (links > 0) what += fmt::format(" and {} link{}", links, links == 1 ? "" : "s");
  std::cout << fmt::format("{} {} ({}){}\n", verb, what, size_text(report.bytes),
                           jobs.empty() ? "" : "; jobs " + jobs);
  for (const auto& path : report.paths) std::cout << "  " << path << "\n";
  return 0;
}

}  // namespace

Command add_clean_command(CLI::App& dlrun) {
  auto args = std::make_shared<CleanArgs>();
  CLI::App* app = dlrun.add_subcommand(
      "clean",
      "Remove old run directories (logs, checkpoints): those of jobs that ended more than 14 days "
      "ago, except "
      "the 20 that ended last, or of the jobs named. Their records stay in dlrun status --all");
  app->add_option("JOB", args->jobs, "Ended jobs whose run directories go now, whatever their age");
  app->add_option("--older-than", args->days,
                  "Jobs that ended more than DAYS ago (default: [retention] days)")
      ->type_name("DAYS")
      ->check(CLI::Validator(
          [](std::string& text) {
            double days = 0;
            if (!CLI::detail::lexical_cast(text, days)) return std::string();  // CLI11 says it
            // NaN passes any range (every comparison is false): it read as 0, every ended job.
            // Worded as CLI::Range's message, which plain_parse_error rewords.
            return days >= 0 && days <= 36500 ? std::string()
                                              : "Value " + text + " not in range 0 to 36500";
          },
          ""));
  app->add_option("--keep", args->keep,
                  "Always keep the N jobs that ended last (default: [retention] keep)")
      ->type_name("N")
      ->check(CLI::Range(0, 1000000));
  app->add_flag("-n,--dry-run", args->dry_run, "Say what would be removed, remove nothing");
  app->add_flag("--auto", args->automatic,
                "The daily pass a job's end starts: the settings, no output")
      ->group("");
  app->footer(
      "The same pass runs by itself at most once a day, started in the background when a job ends. "
      "Settings: "
      "[retention] days (0: never by age) and keep in $DLRUN_HOME/config.toml. Only directories "
      "dlrun made "
      "under $DLRUN_HOME are removed; a --run-dir elsewhere loses only its link in "
      "$DLRUN_HOME/runs "
      "(docs/jobs.md, Retention).\n"
      "--older-than 0 takes every ended job (beyond --keep); days = 0 in config.toml turns the age "
      "rule off.\n"
      "Exit code: 0; 2 for a job that does not exist or has not ended, or a bad [retention] "
      "setting; 1 when a "
      "directory could not be removed (docs/exit-codes.md).");
  return {app, [args, app](const Trailing&) { return run_clean(*args, *app); }};
}

}  // namespace dlrun::cli
