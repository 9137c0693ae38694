// `dlrun _supervise ID`: the detached process that owns one submitted job from its
// submission to its end. See job_queue.hpp.

#include <fcntl.h>
#include <signal.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cstring>
#include <filesystem>
#include <optional>
#include <random>
#include <thread>

#include <fmt/format.h>

#include "dlrun/launcher/cluster_job.hpp"
#include "dlrun/error.hpp"
#include "dlrun/launcher/exit_status.hpp"
#include "dlrun/launcher/job_environment.hpp"
#include "dlrun/launcher/job_metrics.hpp"
#include "dlrun/launcher/gpu_claims.hpp"
#include "dlrun/launcher/job_queue.hpp"
#include "dlrun/launcher/job_resize.hpp"
#include "dlrun/launcher/job_spec.hpp"
#include "dlrun/launcher/plan.hpp"
#include "dlrun/launcher/private_files.hpp"
#include "dlrun/launcher/scheduler_settings.hpp"
#include "dlrun/launcher/process.hpp"
#include "dlrun/log.hpp"
#include "dlrun/launcher/supervisor.hpp"
#include "dlrun/protocol.hpp"

namespace fs = std::filesystem;

namespace dlrun::launcher {
namespace {

constexpr int k_sweep_every = 10;  // polls between sweeps of the queue
// A running job looks every so often: is a scheduler alive (a goodput job's)? Was a resize left
// unfinished?
constexpr auto k_running_check = std::chrono::seconds(5);

// A stop signal that came within `seconds` (0: none).
int wait_for_stop_signal(const sigset_t& stop, double seconds) {
  timespec timeout{static_cast<time_t>(seconds), static_cast<long>((seconds - static_cast<time_t>(seconds)) * 1e9)};
  const int sig = ::sigtimedwait(&stop, nullptr, &timeout);
  return sig > 0 ? sig : 0;
}

// For a fifo GPU job: goodput jobs submitted before this have waited past starvation_seconds,
// and it waits behind them (JobStore::try_start); 0 for none (a CPU job; config.toml unreadable:
// the scheduler says so).
double goodput_starving_before(JobQueue& queue, const JobRecord& job) {
  if (!job.submitted.request.uses_gpus) return 0;
  try {
    return now_seconds() - read_scheduler_settings(queue.home()).policy.starvation_seconds;
  } catch (const ConfigError&) {
    return 0;
  }
}

// Waits for the job's turn. False when it was cancelled (or ended) meanwhile. A goodput job
// is started by the scheduler (its state turns RUNNING, with the GPUs it chose); any other
// starts itself, in order (try_start).
bool wait_for_resources(JobQueue& queue, int64_t id, Capacity capacity, const Environment& env) {
  const sigset_t stop = stop_signal_set();
  // While it waits for GPUs other users' jobs hold, it says so in the claims directory: their
  // schedulers make room for it (machine_share.hpp).
  std::optional<GpuWant> want;
  std::optional<int64_t> version;
  int next_sweep = k_sweep_every;
  int full_every = k_sweep_every;
  for (int poll = 0;; ++poll) {
    // Only what another process changed in the store can start it (a job that ended, a cancel,
    // the scheduler's choice), and for a GPU job other stores' GPU claims, looked at each
    // second: between those, a poll reads one number and takes no lock. (A CPU job looks anyway
    // every 5 s.)
    const int64_t now = queue.store().changes_by_others();
    if (poll % full_every != 0) {
      if (version == now) {
        if (const int sig = wait_for_stop_signal(stop, 0.1)) {
          queue.store().cancel_pending(id, fmt::format("by {} to its supervisor", signal_name(sig)),
                                       exit_code::k_signal_base + sig);
          return false;
        }
        continue;
      }
    }
    version = now;
    // Other stores' jobs take and release GPUs meanwhile (gpu_claims.hpp): look again each second.
    auto job = queue.store().get(id);
    if (!job || is_terminal(job->state)) return false;
    full_every = job->submitted.request.uses_gpus ? k_sweep_every : 5 * k_sweep_every;
    if (!job->submitted.request.uses_gpus) capacity.cpu_slots = queue.cpu_slots();
    // (A goodput job is started by the scheduler, which looks at them itself.)
    if (poll > 0 && poll % k_sweep_every == 0 && capacity.gpus > 0 && !job->submitted.request.goodput) {
      capacity.gpus_elsewhere = queue.gpus_elsewhere();
    }
    if (poll % k_sweep_every == 0 && job->submitted.request.uses_gpus && capacity.gpus > 0) {
      const auto& request = job->submitted.request;
      // (A fifo job's count of them was read just above; a goodput job keeps none.)
      const bool others_hold = request.goodput ? !queue.gpu_ids_elsewhere().empty() : !capacity.gpus_elsewhere.empty();
      const bool first_in_line = request.goodput || queue_head(queue.store().list(false, 0), true) == id;
      if (first_in_line && others_hold) {
        if (!want) want.emplace(env, std::to_string(id), std::max(1, request.min_ranks));
      } else {
        want.reset();
      }
    }
    if (job->submitted.request.goodput) {
      if (job->state != JobState::pending) return true;
      if (poll % k_sweep_every == 0) queue.ensure_scheduler();
    } else if (queue.store().try_start(id, capacity, queue.run_dir(id), goodput_starving_before(queue, *job))) {
      return true;
    }
    if (poll >= next_sweep) {
      // Between them the waiting jobs' supervisors sweep about once a second (each read every
      // active job: 100 waiting jobs each sweeping every second used a fifth of a core).
      const int waiting = queue.sweep(false);
      next_sweep = poll + k_sweep_every * std::clamp(waiting, 1, 10);
    }
    if (const int sig = wait_for_stop_signal(stop, 0.1)) {
      queue.store().cancel_pending(id, fmt::format("by {} to its supervisor", signal_name(sig)),
                                   exit_code::k_signal_base + sig);
      return false;
    }
  }
}

void send_output_to(const std::string& path) {
  int fd = ::open(path.c_str(), O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC | O_NOFOLLOW, 0644);
  if (fd < 0) return;
  ::dup2(fd, STDOUT_FILENO);
  ::dup2(fd, STDERR_FILENO);
  ::close(fd);
}

PlanOptions options_for(const JobSpec& spec, const Allocation& allocation, const std::string& run_dir,
                        const std::string& log_dir) {
  PlanOptions options;
  if (spec.gpus) {
    options.gpus = GpuRequest{std::nullopt, allocation.gpu_ids};  // the scheduler's choice
  } else {
    options.nproc = allocation.ranks;
  }
  // Elastic: the rank count may later move within the job file's MIN:MAX.
  const RankRange& range = spec.gpus ? *spec.gpus : *spec.nproc;
  options.min_ranks = range.min;
  options.max_ranks = range.max;
  options.grace_seconds = spec.grace;
  options.max_restarts = spec.max_restarts;
  options.watchdog_seconds = spec.watchdog;
  options.time_limit_seconds = spec.time_limit;
  options.run_dir = run_dir;
  options.log_dir = log_dir;
  options.color = ColorMode::never;
  options.command = spec.command;
  options.source = SettingsSource::job_file;
  return options;
}

// A job of scheduler kind "ssh": `dlrun run` from here, recorded in the store.
int run_remote(JobQueue& queue, int64_t id, const JobSpec& spec, const Environment& env, const std::string& run_dir,
               const std::string& log_dir) {
  ClusterOptions cluster;
  cluster.plan.command = spec.command;
  cluster.plan.source = SettingsSource::job_file;
  cluster.plan.grace_seconds = spec.grace;
  cluster.plan.max_restarts = spec.max_restarts;
  cluster.plan.watchdog_seconds = spec.watchdog;
  cluster.plan.time_limit_seconds = spec.time_limit;
  cluster.plan.run_dir = run_dir;
  cluster.plan.log_dir = log_dir;
  cluster.job_id = std::to_string(id);
  // What the job file gives the ranks reaches them on every host (ssh carries no environment).
  // As dlrun run -x: what export_env names, and the submitter's NCCL_* (kept by default).
  auto exported = spec.export_env;
  exported.push_back("NCCL_*");
  cluster.job_env = exported_by_name(env, exported);
  for (const auto& [key, value] : spec.env) cluster.job_env[key] = value;
  cluster.job_env[env::k_checkpoint_dir] = env.at(env::k_checkpoint_dir);
  cluster.plan.color = ColorMode::never;
  cluster.plan.prefix = "[{host}:{rank}] ";
  cluster.hosts = hosts_of(spec);
  cluster.gpu_slots = spec.gpu_slots;
  cluster.ssh.config_file = spec.ssh_config;
  if (!spec.remote_dlrun.empty()) cluster.remote_dlrun = spec.remote_dlrun;
  if (spec.connect_timeout) cluster.ssh.connect_timeout_seconds = *spec.connect_timeout;
  if (spec.join_timeout) cluster.join_timeout = *spec.join_timeout;
  int code = run_cluster_job(cluster, env);
  bool stopped = code == exit_code::k_signal_base + SIGTERM || code == exit_code::k_signal_base + SIGINT ||
                 code == exit_code::k_signal_base + SIGHUP || code == exit_code::k_signal_base + SIGQUIT;
  // Stopped by dlrun cancel: said as for any job (the note is for this process, run_dir.hpp).
  const auto cancelled_by = stopped ? cancel_note(run_dir, static_cast<int>(::getpid())) : std::nullopt;
  const std::string reason = code == 0         ? ""
                             : cancelled_by ? "by " + *cancelled_by
                                            : fmt::format("dlrun run exited with code {}", code);
  const double ended = now_seconds();
  write_when_store_takes_it(fmt::format("job {}'s end", id), [&] {
    // The result first: a reader that sees the job ended sees its result too.
    queue.keep_result(id, run_dir);
    queue.store().finish(id, state_after(code, stopped), code, reason, {std::nullopt, read_job_metrics(run_dir), ended});
  });
  return code;
}

}  // namespace

int run_submitted_job(int64_t id, const Environment& env) {
  // Until the Supervisor's handlers exist, stop signals wait (they mean "cancel"), and so do a
  // resize request and a SIGUSR1 for the ranks (their default action would end this process).
  sigset_t stop = stop_signal_set();
  ::sigprocmask(SIG_BLOCK, &stop, nullptr);
  block_passed_signals();

  JobQueue queue(env);
  JobStore& store = queue.store();
  if (!store.claim(id, ProcessIdentity::self())) return 0;  // another supervisor has it
  auto record = store.get(id);
  if (!record) return 0;
  // The run directory exists before the job turns RUNNING: a resize request sent the moment
  // it does finds where to go (and waits, blocked above, until the Supervisor listens).
  const std::string run_dir = queue.run_dir(id);
  std::error_code ec;
  fs::create_directories(run_dir, ec);
  // Its GPUs are claimed machine-wide while its ranks use them, so that other users' dlrun
  // leaves them be (gpu_claims.hpp). Its GPUs come from the store: it runs inside no other
  // job's, whatever DLRUN_JOB_ID the submitter's environment (a rank of another job) carried.
  const auto claims_dir = gpu_claims_dir(env);
  GpuClaims claims(claims_dir.value_or(""), dlrun_home(env), std::to_string(id), "",
                   claims_dir ? GpuKeys::here() : GpuKeys{});
  std::mt19937 jitter(std::random_device{}());
  while (true) {
    if (!wait_for_resources(queue, id, queue.capacity(), env)) {
      fs::remove(run_dir, ec);  // cancelled before it started: nothing in it (only if empty)
      return 0;
    }
    record = store.get(id);
    const auto shared = claims.hold(record->allocation.gpu_ids);
    if (shared.empty()) break;
    // Another user's dlrun chose the same GPUs at the same moment (each store sees the other's
    // only once they are claimed): this job gives them back and waits for its next turn, with
    // a random pause, so that the two do not meet again. Two trainings never share a GPU so.
    claims.hold({});
    const std::string why = fmt::format("{} at the moment it started: back in the queue", sharing_warning(shared));
    log::warn("job {}: {}", id, why);
    if (!store.requeue(id, why)) break;  // cancelled meanwhile: its record says so below
    std::this_thread::sleep_for(std::chrono::milliseconds(200 + jitter() % 800));
  }
  record = store.get(id);
  std::optional<JobSpec> parsed;
  std::string parse_error;
  try {
    parsed = submitted_spec(*record);
  } catch (const Error& e) {
    parse_error = e.what();
  }
  const std::string log_dir = parsed ? queue.log_dir(id, *parsed) : run_dir;
  fs::create_directories(log_dir, ec);
  // Another user's LOG_DIR/ID (made first: job numbers are known in advance) is not written at
  // all, output.log included, which a link there would have sent to a file of this user's.
  std::string log_dir_problem;
  try {
    check_own_directory(log_dir, "log directory");
    send_output_to(log_dir + "/output.log");
  } catch (const Error& e) {
    log_dir_problem = e.what();
  }
  try {
    if (!log_dir_problem.empty()) throw ConfigError(log_dir_problem);
    if (!parsed) throw ConfigError(parse_error);
    const JobSpec& spec = *parsed;
    Environment base = decode_environment(record->submitted.environment);
    base.erase(env::k_umask);  // this process's own: the ranks get it as their umask
    // A job queued by dlrun submit --resume goes on in the checkpoints of the job it resumes.
    const auto resumed = base.find(env::k_resumed_checkpoint_dir);
    const std::string checkpoint_dir =
        resumed != base.end() ? resumed->second : checkpoint_dir_of(spec, std::to_string(id), run_dir);
    if (resumed != base.end()) base.erase(resumed);
    if (!spec.checkpoint_dir.empty()) check_own_directory(checkpoint_dir, "checkpoint_dir");
    for (const auto& [key, value] : spec.env) base[key] = value;
    base[env::k_checkpoint_dir] = checkpoint_dir;
    if (spec.gpus) base.erase(env::k_cuda_visible_devices);  // the scheduler's GPU numbers are physical
    if (::chdir(spec.workdir.c_str()) != 0) {
      throw ConfigError(fmt::format("cannot enter workdir {}: {}", spec.workdir, std::strerror(errno)));
    }
    if (spec.remote()) return run_remote(queue, id, spec, base, run_dir, log_dir);
    Plan job = make_plan(options_for(spec, record->allocation, run_dir, log_dir), base, std::to_string(id));
    job.program.working_dir = spec.workdir;
    job.on_restart = [&store, id](const RestartCounts& counts) {
      store.set_restarts(id, counts.failures, counts.resizes, counts.requested);
    };
    // The supervisor records its own new size: the store must not wait for the answer to reach
    // `dlrun resize` or the scheduler, which may be gone by then (Ctrl-C on a slow resize).
    auto claim = [&claims](const std::vector<std::string>& gpu_ids) {
      if (auto shared = claims.hold(gpu_ids); !shared.empty()) log::warn("{}", sharing_warning(shared));
    };
    claim(job.gpu_ids);
    // What its ranks run at, and whether they are changing size: the store's record of a
    // resize whose requester died before recording its outcome is put right from these.
    Allocation running = record->allocation;
    bool changing_size = false;
    job.on_rescale = [&store, id, &claims, claim, &running, &changing_size](bool rescaling, int world_size,
                                                                            const std::vector<std::string>& gpu_ids) {
      changing_size = rescaling;
      if (!rescaling) running = {world_size, gpu_ids};
      // While the ranks change size the old ones may still run, and a grow's new GPUs are the
      // store's already (begin_resize took them before asking): the GPUs of both sizes are
      // claimed until the ranks run at the new one.
      std::vector<std::string> claimed = gpu_ids;
      if (rescaling) {
        std::vector<std::string> both = claims.held();
        if (auto now = store.get(id)) both.insert(both.end(), now->allocation.gpu_ids.begin(), now->allocation.gpu_ids.end());
        for (const auto& gpu : both) {
          if (std::find(claimed.begin(), claimed.end(), gpu) == claimed.end()) claimed.push_back(gpu);
        }
      }
      if (!gpu_ids.empty()) claim(claimed);
      if (!rescaling) store.set_allocation(id, {world_size, gpu_ids}, "resize");
      store.set_rescaling(id, rescaling);
    };
    Supervisor supervisor(job);
    const bool goodput = record->submitted.request.goodput;
    supervisor.begin();
    // A goodput job keeps a scheduler alive while it runs (one killed is replaced); the store's
    // record of a resize whose requester died midway is put right.
    auto next_check = std::chrono::steady_clock::now() + k_running_check;
    bool store_said = false;
    while (supervisor.poll_once(std::chrono::milliseconds(500))) {
      if (std::chrono::steady_clock::now() < next_check) continue;
      next_check = std::chrono::steady_clock::now() + k_running_check;
      try {
        if (!changing_size && undo_abandoned_resize(queue, id, run_dir, running)) {
          log::warn("job {}: a resize was left unfinished (its requester ended before recording it): the job's "
                    "allocation is {} rank{} again",
                    id, running.ranks, running.ranks == 1 ? "" : "s");
        }
        if (goodput) queue.ensure_scheduler();
        store_said = false;
      } catch (const StoreUnavailable& e) {
        // Checks of a running job wait for the next round; its ranks go on (a store locked past
        // the busy timeout failed the job).
        if (!store_said) log::warn("job {}: {}", id, e.what());
        store_said = true;
      }
    }
    supervisor.end();
    claims.hold({});  // its ranks have ended: their GPUs are free before the store says so
    const int code = supervisor.exit_code();
    const double ended = now_seconds();  // what a late record keeps, not when the store took it
    write_when_store_takes_it(fmt::format("job {}'s end", id), [&] {
      // The result first: a reader that sees the job ended sees its result too (a test read null).
      queue.keep_result(id, run_dir);
      store.finish(id, state_after(code, supervisor.stop_signal() != 0), code, supervisor.summary(),
                   {supervisor.failed_rank(), read_job_metrics(run_dir), ended});
    });
    // Its GPUs go to the goodput jobs left, if any; started with this job's environment only
    // when it is one of them (the others' supervisors start one with theirs).
    if (goodput) queue.ensure_scheduler();
    queue.maybe_start_retention();
    return code;
  } catch (const Error& e) {
    log::error("{}", e.what());
    // Exit 2 says "nothing was submitted"; this job was, and could not start (its program or
    // working directory gone by then): dlrun could not start a process, 70.
    const int code = e.exit_code() == exit_code::k_usage ? exit_code::k_internal : e.exit_code();
    const double ended = now_seconds();
    write_when_store_takes_it(fmt::format("job {}'s end", id), [&] {
      store.finish(id, JobState::failed, code, e.what(), {std::nullopt, read_job_metrics(run_dir), ended});
    });
    return code;
  }
}

}  // namespace dlrun::launcher
