// `dlrun wait JOB…`: wait for jobs already submitted (or run in the foreground elsewhere) to
// end, say how each ended, and exit with the first failed one's exit code: what
// `dlrun submit --wait` does for the job it submits, for a CI script that submitted several.

#include <signal.h>

#include <algorithm>
#include <chrono>
#include <iostream>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include <fmt/format.h>
#include <fmt/ranges.h>

#include "commands.hpp"
#include "group_options.hpp"
#include "job_end.hpp"
#include "dlrun/error.hpp"
#include "dlrun/launcher/exit_status.hpp"
#include "dlrun/launcher/job_queue.hpp"
#include "dlrun/launcher/job_ref.hpp"
#include "dlrun/launcher/process.hpp"
#include "dlrun/protocol.hpp"

namespace dlrun::cli {
namespace {

constexpr int k_timed_out_code = exit_code::k_timeout;

struct WaitArgs {
  std::vector<std::string> jobs;
  double timeout = 0;
  int tail = 20;
  bool quiet = false;
};

int run_wait(const WaitArgs& args, bool has_timeout) {
  launcher::JobQueue queue(launcher::current_environment());
  // Every job named is known before any waiting (a typo is said at once, not after an hour).
  std::vector<int64_t> ids;
  for (const auto& job : args.jobs) {
    ids.push_back(launcher::job_number(queue.store(), launcher::parse_job_ref(job), "wait",
                                       launcher::NamedJob::active_first));
  }
  // A stop signal ends the waiting, never the jobs (they are not this command's).
  const sigset_t stop = launcher::stop_signal_set();
  ::sigprocmask(SIG_BLOCK, &stop, nullptr);
  using Clock = std::chrono::steady_clock;
  const auto start = Clock::now();
  // Each job's end is said in the order named; at --timeout or a signal, every job that has
  // ended is said too (those named after the first still running were never said). The exit
  // code is that of the first named that did not succeed.
  std::vector<bool> said(ids.size(), false);
  auto say_ended = [&] {
    for (size_t j = 0; j < ids.size(); ++j) {
      if (said[j]) continue;
      auto job = queue.store().get(ids[j]);
      if (!job || !launcher::is_terminal(job->state)) continue;
      said[j] = true;
      if (!args.quiet) print_job_end(queue, ids[j], args.tail, std::cout);
    }
  };
  for (size_t i = 0; i < ids.size(); ++i) {
    if (said[i]) continue;
    std::optional<double> left;
    if (has_timeout) left = std::max(0.0, args.timeout - std::chrono::duration<double>(Clock::now() - start).count());
    const int sig = queue.wait(ids[i], &stop, left);
    if (sig == 0) {
      said[i] = true;
      if (!args.quiet) print_job_end(queue, ids[i], args.tail, std::cout);
      continue;
    }
    say_ended();
    std::vector<std::string> going_on;
    for (size_t j = 0; j < ids.size(); ++j) {
      if (!said[j]) going_on.push_back(std::to_string(ids[j]));
    }
    // (Every job left may have ended just as the time ran out or the signal came: then their
    // ends are said above, as if it had not.)
    if (!going_on.empty()) {
      const std::string jobs = fmt::format("job{} {}", going_on.size() == 1 ? "" : "s", fmt::join(going_on, ", "));
      if (sig == launcher::JobQueue::k_timed_out) {
        std::cerr << fmt::format("dlrun: {} not ended after --timeout {:g} s; {} on (dlrun status {})\n", jobs,
                                 args.timeout, going_on.size() == 1 ? "it goes" : "they go", going_on.front());
        return k_timed_out_code;
      }
      std::cerr << fmt::format("dlrun: got {}: stopped waiting; {} {} on (dlrun cancel stops {})\n",
                               launcher::signal_name(sig), jobs, going_on.size() == 1 ? "goes" : "go",
                               going_on.size() == 1 ? "it" : "them");
      return exit_code::k_signal_base + sig;
    }
  }
  for (const int64_t id : ids) {
    auto job = queue.store().get(id);
    if (job && job->state != launcher::JobState::succeeded) {
      const int code = job->exit_code.value_or(exit_code::k_internal);
      return code == 0 ? 1 : code;  // not SUCCEEDED, whatever it recorded
    }
  }
  return 0;
}

}  // namespace

Command add_wait_command(CLI::App& dlrun) {
  auto args = std::make_shared<WaitArgs>();
  CLI::App* app = dlrun.add_subcommand(
      "wait",
      "Wait for jobs to end (submitted, or run by dlrun local or run elsewhere), print how each ended, and exit "
      "with the exit code of the first that did not succeed.\n"
      "  a=$(dlrun submit --parsable a.toml); b=$(dlrun submit --parsable b.toml)\n"
      "  dlrun wait $a $b                    for CI: 0 when both succeeded");
  app->add_option("JOB", args->jobs, "Jobs' numbers or names (a name: the newest of that name that has not ended)")
      ->required();
  CLI::Option* timeout = app->add_option("--timeout", args->timeout,
                                         "Give up waiting after this many seconds (exit 124; the jobs go on)")
                             ->check(duration_check())
                             ->type_name("SECONDS");
  app->add_option("--tail", args->tail, "Lines of a failed job's failing rank's log to print (0: none)")
      ->type_name("N")
      ->capture_default_str()
      ->check(CLI::Range(0, 100000));
  app->add_flag("-q,--quiet", args->quiet, "Print nothing; the exit code says it");
  app->footer(
      "The jobs are waited for in the order given, and each one's end is printed as it is reached. Exit codes: 0 "
      "every job SUCCEEDED; else the exit code of the first job named that did not (as dlrun submit --wait: the "
      "failing rank's code, 143 cancelled, 70 lost...); 124 --timeout passed first; 130, 143, 129 or 131 when this "
      "command got SIGINT, SIGTERM, SIGHUP or SIGQUIT (the jobs go on: dlrun cancel stops them); 2 no such job "
      "(docs/exit-codes.md).");
  return {app, [args, timeout](const Trailing&) { return run_wait(*args, timeout->count() > 0); }};
}

}  // namespace dlrun::cli
