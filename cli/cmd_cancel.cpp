// `dlrun cancel JOB…`: stop jobs, gracefully, then by force; or, with --signal, pass SIGUSR1 or
// SIGUSR2 on to their ranks and leave them running (as Slurm's scancel --signal).

#include <signal.h>
#include <unistd.h>

#include <algorithm>
#include <cctype>
#include <iostream>
#include <memory>
#include <set>
#include <string>
#include <variant>
#include <vector>

#include <fmt/ranges.h>

#include "commands.hpp"
#include "dlrun/error.hpp"
#include "dlrun/launcher/exit_status.hpp"
#include "dlrun/launcher/job_queue.hpp"
#include "dlrun/launcher/job_ref.hpp"
#include "dlrun/launcher/process.hpp"
#include "dlrun/log.hpp"

namespace dlrun::cli {
namespace {

struct CancelArgs {
  std::vector<std::string> jobs;
  bool force = false;
  std::string signal;
};

// "USR1", "SIGUSR1", "usr1" or "10" (and the same of USR2): the signals a job's ranks may be
// sent without stopping it. The stop signals are what cancel itself sends.
int parse_passed_signal(const std::string& given) {
  std::string text = given;
  std::transform(text.begin(), text.end(), text.begin(), [](unsigned char c) { return std::toupper(c); });
  if (text.rfind("SIG", 0) == 0) text.erase(0, 3);
  if (text == "USR1" || text == std::to_string(SIGUSR1)) return SIGUSR1;
  if (text == "USR2" || text == std::to_string(SIGUSR2)) return SIGUSR2;
  throw ConfigError("--signal " + given +
                    ": USR1 or USR2 are what can be sent to a job's ranks (they keep running); to stop a job, "
                    "dlrun cancel JOB without --signal");
}

// Which of two outcomes the exit code says: a job that may still run (1, or dlrun's own
// failure) before a name that is no job (2), before "try again" (75), which a script may retry.
int worse(int a, int b) {
  auto rank = [](int code) { return code == 0 ? 0 : code == exit_code::k_temp_failure ? 1 : code == exit_code::k_usage ? 2 : 3; };
  return rank(b) > rank(a) ? b : a;
}

// A name that several of this user's jobs that have not ended share (a job file submitted
// twice): cancelling the newest of them may be the wrong one; the numbers say which.
void refuse_an_ambiguous_name(launcher::JobQueue& queue, const std::string& name, const char* verb) {
  const int me = static_cast<int>(::geteuid());
  std::vector<std::string> named;
  for (const auto& record : queue.store().list(false, 0)) {
    if (record.name == name && !launcher::is_terminal(record.state) && (record.submitted.owner_uid == me || record.submitted.owner_uid < 0)) {
      named.push_back(fmt::format("{} {}", record.id, launcher::to_string(record.state)));
    }
  }
  if (named.size() < 2) return;
  throw ConfigError(fmt::format("{} of your jobs named '{}' have not ended ({}): say which by number (dlrun {} "
                                "takes several)",
                                named.size(), name, fmt::join(named, ", "), verb));
}

void say_ended(int64_t id, launcher::JobState state, bool had_ended) {
  if (had_ended) {
    std::cout << "Job " << id << " had already ended (" << launcher::to_string(state) << ")\n";
  } else {
    std::cout << "Job " << id << " " << launcher::to_string(state) << "\n";
  }
}

int run_cancel(const CancelArgs& args) {
  const int signal = args.signal.empty() ? 0 : parse_passed_signal(args.signal);
  launcher::JobQueue queue(launcher::current_environment());
  // A job whose supervisor was killed (kill -9 of dlrun local) read RUNNING, and its cancel
  // wrote "CANCELLED by dlrun cancel (killed …)" of ranks long dead: it is put right first, as
  // dlrun status would (FAILED, lost), and then said to have ended.
  queue.sweep(false);
  const char* verb = signal ? "signal" : "cancel";
  // Every job named is tried, in order, whatever became of the ones before (an unknown one
  // first left the rest running); the worst outcome is the exit code, each failure said as it
  // comes. A name means the newest of its jobs that has not ended, if one has not.
  // Running jobs are all sent their stop signal first, then waited for: they stop together
  // (one grace period, not one after the other), and the scheduler cannot grow a job named
  // later into the GPUs of one that has already stopped.
  int code = 0;
  auto failed = [&](const Error& e) {
    std::cout.flush();
    log::error("{}", e.what());
    code = worse(code, e.exit_code());
  };
  std::vector<launcher::JobQueue::CancelUnderWay> under_way;
  std::set<int64_t> named;
  for (const auto& job : args.jobs) {
    try {
      const launcher::JobRef ref = launcher::parse_job_ref(job);
      if (!ref.number) refuse_an_ambiguous_name(queue, ref.text, verb);
      const int64_t id = launcher::job_number(queue.store(), ref, verb, launcher::NamedJob::active_first);
      if (!named.insert(id).second) continue;  // named twice: once is enough
      if (signal) {
        queue.send_signal(id, signal);
        // Its supervisor passes it on; a rank that has set no handler for it yet gets it once it
        // sets one (the job's log says so), which this command cannot wait for.
        std::cout << "Job " << id << ": " << launcher::signal_name(signal)
                  << " sent for its ranks (one that handles it gets it now, one that has set no handler yet once it "
                     "does)\n";
        continue;
      }
      auto before = queue.store().get(id);
      auto begun = queue.begin_cancel(id, args.force);
      if (auto* state = std::get_if<launcher::JobState>(&begun)) {
        say_ended(id, *state, before && launcher::is_terminal(before->state));
      } else {
        under_way.push_back(std::get<launcher::JobQueue::CancelUnderWay>(begun));
      }
    } catch (const Error& e) {
      if (args.jobs.size() == 1) throw;
      failed(e);
    }
  }
  for (const auto& cancel : under_way) {
    try {
      say_ended(cancel.id, queue.finish_cancel(cancel), false);
    } catch (const Error& e) {
      if (args.jobs.size() == 1) throw;
      failed(e);
    }
  }
  return code;
}

}  // namespace

Command add_cancel_command(CLI::App& dlrun) {
  auto args = std::make_shared<CancelArgs>();
  CLI::App* app = dlrun.add_subcommand(
      "cancel",
      "Stop jobs: a pending job leaves the queue (listed as CANCELLED); a running job's ranks get SIGTERM, then "
      "SIGKILL after the job's grace period. With --signal USR1|USR2: send that to a running job's ranks and leave "
      "it running");
  app->add_option("JOB", args->jobs, "Jobs' numbers or names, submitted or run by dlrun local or run (dlrun status "
                                      "lists them)")
      ->required();
  auto* force = app->add_flag("--force", args->force, "Kill the ranks at once (SIGKILL)");
  app->add_option("--signal", args->signal,
                  "Do not stop the jobs: send their ranks USR1 or USR2 and leave them running (a program on dlrun's "
                  "runtime checkpoints and starts again from it at USR1; docs/local.md#signals)")
      ->type_name("SIG")
      ->excludes(force);
  app->footer("A name means the newest job of that name that has not ended, if any has not. Every job named is "
              "tried, in order; running jobs are all signalled before any is waited for, so they stop together. The "
              "exit code is the worst outcome. Exit codes: 0 every job named is cancelled (or "
              "had already ended), or was signalled; 1 a job could not be stopped, or signalled (it is not "
              "running); 2 no such job, or another user's; with --signal, 75 a job was changing its size, try "
              "again (docs/exit-codes.md).");
  return {app, [args](const Trailing&) { return run_cancel(*args); }};
}

}  // namespace dlrun::cli
