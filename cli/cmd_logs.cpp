// `dlrun logs JOB [--rank R] [-f]`: a job's output, all ranks prefixed or one rank's own.

#include <signal.h>
#include <unistd.h>

#include <iostream>
#include <memory>

#include "commands.hpp"
#include "dlrun/launcher/fd_io.hpp"
#include "dlrun/launcher/job_logs.hpp"
#include "dlrun/launcher/job_ref.hpp"
#include "dlrun/launcher/process.hpp"
#include "dlrun/log.hpp"

namespace dlrun::cli {
namespace {

struct LogsArgs {
  std::string job;
  int rank = -1;
  bool follow = false;
};

int run_logs(const LogsArgs& args) {
  // As cat or tail: once the reader is gone (logs -f | grep -m1 …), go too, as SIGPIPE ends them.
  ::signal(SIGPIPE, SIG_DFL);
  launcher::JobQueue queue(launcher::current_environment());
  // Without a job: the newest, as `latest` names it (said on stderr, so stdout is the log).
  const int64_t id = launcher::job_number(queue.store(), launcher::parse_job_ref(args.job.empty() ? "latest" : args.job),
                                          "logs", launcher::NamedJob::active_first);
  if (args.job.empty()) log::info("job {}, your newest", id);
  launcher::copy_job_log(queue, id, args.rank,
                         args.follow ? launcher::Follow::until_the_job_ends : launcher::Follow::no, std::cout,
                         [] { return launcher::reader_gone(STDOUT_FILENO); });
  if (args.follow && launcher::reader_gone(STDOUT_FILENO)) ::raise(SIGPIPE);
  return 0;
}

}  // namespace

Command add_logs_command(CLI::App& dlrun) {
  auto args = std::make_shared<LogsArgs>();
  CLI::App* app = dlrun.add_subcommand("logs", "Print a job's output: all ranks prefixed, or one rank's own log");
  app->add_option("JOB", args->job, "A job's number or name, submitted or run by dlrun local or run (dlrun status "
                                     "lists them); latest, or none: your newest job");
  app->add_option("--rank", args->rank, "Only this rank's output, as it wrote it")
      ->type_name("R")
      ->check(CLI::NonNegativeNumber.description(""));
  app->add_flag("-f,--follow", args->follow, "Keep printing new output until the job ends (or the reader is gone: | grep -m1 …)");
  app->footer("Exit codes: 0 the output is printed (with --follow: once the job ended); 2 no such job or rank "
              "(docs/exit-codes.md).");
  return {app, [args](const Trailing&) { return run_logs(*args); }};
}

}  // namespace dlrun::cli
