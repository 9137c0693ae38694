// `dlrun submit JOB.toml`: queue a job on this machine and return at once, or (--wait) wait
// for its end, say how it ended, and exit with its code.

#include <signal.h>

#include <chrono>
#include <iostream>
#include <optional>
#include <memory>

#include <fmt/format.h>

#include "commands.hpp"
#include "group_options.hpp"
#include "job_end.hpp"
#include "dlrun/error.hpp"
#include "dlrun/launcher/exit_status.hpp"
#include "dlrun/launcher/job_queue.hpp"
#include "dlrun/launcher/process.hpp"
#include "dlrun/log.hpp"
#include "dlrun/protocol.hpp"

namespace dlrun::cli {
namespace {

struct SubmitArgs {
  std::string job_file;
  std::string resume;  // --resume JOB
  bool parsable = false;
  bool wait = false;
  bool dry_run = false;
  bool check = false;
  bool detach_on_interrupt = false;
  int tail = 20;
  std::string scheduler;
  std::string name;
  std::optional<double> timeout;
};

// SIGINT, SIGTERM, SIGHUP or SIGQUIT while waiting: the job is cancelled (as by dlrun cancel), or left
// running with --detach-on-interrupt. Exits 128 + the signal, as dlrun does when stopped.
int interrupted(launcher::JobQueue& queue, int64_t id, int sig, const SubmitArgs& args, std::ostream& out) {
  const std::string name = launcher::signal_name(sig);
  if (args.detach_on_interrupt) {
    out << fmt::format("Got {}: job {} goes on (--detach-on-interrupt): dlrun status {}, dlrun cancel {}\n", name, id,
                       id, id)
        << std::flush;
    return exit_code::k_signal_base + sig;
  }
  out << fmt::format("Got {}: cancelling job {} (--detach-on-interrupt would leave it running)\n", name, id)
      << std::flush;
  // SIGTERM to its ranks, SIGKILL after its grace: bounded
  queue.cancel(id, false, fmt::format("by {} to dlrun submit --wait", name));
  print_job_end(queue, id, args.tail, out);
  return exit_code::k_signal_base + sig;
}

// --timeout passed before the job ended: as timeout(1) would have it, the job is cancelled (or
// left running with --detach-on-interrupt) and the exit code is 124.
int timed_out(launcher::JobQueue& queue, int64_t id, const SubmitArgs& args, std::ostream& out) {
  if (args.detach_on_interrupt) {
    out << fmt::format("--timeout {:g} s passed: job {} goes on (--detach-on-interrupt): dlrun status {}, dlrun "
                       "cancel {}\n",
                       *args.timeout, id, id, id)
        << std::flush;
    return exit_code::k_timeout;
  }
  out << fmt::format("--timeout {:g} s passed: cancelling job {}\n", *args.timeout, id) << std::flush;
  queue.cancel(id, false, fmt::format("by dlrun submit --wait --timeout {:g}", *args.timeout));
  print_job_end(queue, id, args.tail, out);
  return exit_code::k_timeout;
}

int run_submit(const SubmitArgs& args) {
  if (args.job_file.empty() == args.resume.empty()) {
    throw ConfigError(args.resume.empty() ? "give the job file (dlrun submit job.toml), or --resume JOB"
                                          : "--resume JOB queues that job again from its own job file: give no other");
  }
  launcher::JobQueue queue(launcher::current_environment());
  if (args.check) {
    queue.submit(args.job_file, args.scheduler, args.name, true);
    std::cout << args.job_file << ": fine (--check: nothing was submitted)" << std::endl;
    return 0;
  }
  if (args.dry_run) {
    std::cout << queue.sbatch_script(args.job_file, args.scheduler);
    return 0;
  }
  // With --wait, a stop signal from now on waits for wait() below: one that comes while the
  // job is being submitted cancels it there, instead of leaving it to run unwatched. SIGUSR1
  // and SIGUSR2 wait there too, and are passed on to the job's ranks.
  sigset_t stop = launcher::stop_signal_set();
  const sigset_t passed = launcher::passed_signal_set();
  sigorset(&stop, &stop, &passed);
  if (args.wait) ::sigprocmask(SIG_BLOCK, &stop, nullptr);
  int64_t resumed = 0;
  const int64_t id =
      args.resume.empty() ? queue.submit(args.job_file, args.scheduler, args.name) : queue.resubmit(args.resume, args.name, &resumed);
  if (args.parsable) {
    std::cout << id << std::endl;
  } else if (resumed) {
    std::cout << fmt::format("Submitted job {}, to go on from job {}'s checkpoints in {} (dlrun status {}, dlrun logs "
                             "{} -f)\n",
                             id, resumed, queue.checkpoint_dir_of(*queue.store().get(id)), id, id)
              << std::flush;
  } else {
    std::cout << "Submitted job " << id << " (dlrun status " << id << ", dlrun logs " << id << " -f)" << std::endl;
  }
  queue.sweep(false);
  if (!args.wait) return 0;
  // --parsable keeps standard output to the id alone.
  std::ostream& out = args.parsable ? std::cerr : std::cout;
  std::optional<double> left = args.timeout;
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::duration_cast<std::chrono::steady_clock::duration>(
                                                              std::chrono::duration<double>(args.timeout.value_or(0)));
  while (int sig = queue.wait(id, &stop, left)) {
    if (sig == launcher::JobQueue::k_timed_out) return timed_out(queue, id, args, out);
    if (left) left = std::max(0.0, std::chrono::duration<double>(deadline - std::chrono::steady_clock::now()).count());
    if (sig != SIGUSR1 && sig != SIGUSR2) return interrupted(queue, id, sig, args, out);
    try {
      queue.send_signal(id, sig);
      log::info("got {}: passed on to job {}'s ranks", launcher::signal_name(sig), id);
    } catch (const Error& e) {
      log::warn("got {}: not passed on: {}", launcher::signal_name(sig), e.what());
    }
  }
  print_job_end(queue, id, args.tail, out);
  return queue.store().get(id)->exit_code.value_or(exit_code::k_internal);
}

}  // namespace

Command add_submit_command(CLI::App& dlrun) {
  auto args = std::make_shared<SubmitArgs>();
  CLI::App* app = dlrun.add_subcommand(
      "submit",
      "Queue a job (job.toml) on this machine and return; it runs detached when its GPUs or CPU "
      "slots are free.\n"
      "  dlrun submit job.toml               prints the job id\n"
      "  id=$(dlrun submit --parsable job.toml)\n"
      "  dlrun submit --wait job.toml        for CI: wait, say how it ended, exit with the job's exit code\n"
      "  dlrun submit --resume 12            queue ended job 12 again: its job file, environment and name, from its "
      "checkpoints");
  CLI::Option* job_file = app->add_option("JOB_FILE", args->job_file, "The job file (docs/job-toml.md)");
  CLI::Option* parsable =
      app->add_flag("--parsable", args->parsable, "Print only the job id (with --wait, the end report goes to stderr)");
  CLI::Option* wait = app->add_flag(
      "--wait", args->wait,
      "Wait for the job to end, print how it ended (state, exit code, failing rank and the last lines of its "
      "log) and exit with its exit code. SIGINT, SIGTERM, SIGHUP or SIGQUIT meanwhile cancel the job; SIGUSR1 and "
      "SIGUSR2 are passed on to its ranks");
  app->add_flag("--detach-on-interrupt", args->detach_on_interrupt,
                "With --wait: SIGINT, SIGTERM, SIGHUP or SIGQUIT stop the waiting but leave the job running")
      ->needs(wait);
  app->add_option("--tail", args->tail, "With --wait: lines of the failing rank's log to print (0: none)")
      ->type_name("N")
      ->capture_default_str()
      ->check(CLI::Range(0, 100000))
      ->needs(wait);
  app->add_option("--timeout", args->timeout,
                  "With --wait: cancel the job if it has not ended after SECONDS (left running with "
                  "--detach-on-interrupt), and exit with 124")
      ->type_name("SECONDS")
      ->check(duration_check())
      ->needs(wait);
  app->add_option("--name", args->name,
                  "The job's name, instead of the file's (one job file, a name per CI run: dlrun wait, logs and "
                  "cancel take it)")
      ->type_name("NAME");
  CLI::Option* scheduler = app->add_option("--scheduler", args->scheduler, "Override [scheduler] kind: local, ssh or slurm")
      ->check(CLI::IsMember({"local", "ssh", "slurm"}));
  CLI::Option* dry_run =
      app->add_flag("--dry-run", args->dry_run, "Slurm: print the sbatch script instead of submitting it (nothing to wait for)")
          ->excludes(wait)
          ->excludes(parsable);
  CLI::Option* check = app->add_flag("--check", args->check,
                "Check the job file as a submit does (the file, config.toml, the program, the resources it asks for) "
                "and submit nothing: exit 0 when it would be taken, 2 with what is wrong (a sweep's files checked "
                "before any is submitted)")
      ->excludes(wait)
      ->excludes(parsable)
      ->excludes(dry_run);
  app->add_option("--resume", args->resume,
                  "Queue an ended job again, as a new job: the job file (as submitted: the file may be gone), "
                  "environment and name it was submitted with; its ranks get that job's checkpoint directory, so they "
                  "go on from its last checkpoint (a job cancelled, failed or lost; a failed job of a sweep)")
      ->type_name("JOB")
      ->excludes(job_file)
      ->excludes(scheduler)
      ->excludes(dry_run)
      ->excludes(check);
  app->footer(
      "Exit codes with --wait: 0 the job succeeded; else the job's exit code: the failing rank's own code "
      "(128+N when it was killed by signal N), 143 when it was cancelled (137 when it had to be killed: "
      "dlrun cancel --force, or ranks still running a grace period + 5 s after SIGTERM), 70 when it was lost or "
      "could not start; 130, 143, 129 or 131 "
      "when this command got SIGINT, SIGTERM, SIGHUP or SIGQUIT (the job is then cancelled, or left running with "
      "--detach-on-interrupt); 1 when it could not be cancelled. Without --wait: 0 once submitted. "
      "2: bad usage or job file, nothing submitted; 69: Slurm's sbatch failed (the job is recorded as FAILED) "
      "(docs/exit-codes.md).\n"
      "The job's state, logs and run directories are under $DLRUN_HOME (default $XDG_STATE_HOME/dlrun, or "
      "~/.local/state/dlrun without XDG_STATE_HOME).");
  return {app, [args](const Trailing&) { return run_submit(*args); }};
}

}  // namespace dlrun::cli
