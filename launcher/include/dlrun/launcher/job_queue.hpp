#pragma once
// Jobs on this machine without a daemon: `dlrun submit` checks the job file and starts a
// detached supervisor process for it (`dlrun _supervise --new`, in its own session, so it
// survives the submitting shell and CI step), which records the job in the JobStore with
// itself as its supervisor (no job ever lacks one) and answers its id. That
// supervisor waits its turn (FIFO, resources by GPU index and CPU slot), runs the job
// with the same Supervisor as `dlrun local`, and records how it ended. Any dlrun command
// that opens the queue sweeps it: a pending job whose supervisor is gone is given a new
// one; a running job whose supervisor died is marked FAILED (lost). Layout and states in
// docs/jobs.md. Functions here are not thread-safe (they fork).

#include <signal.h>

#include <chrono>
#include <cstdint>
#include <iosfwd>
#include <map>
#include <optional>
#include <set>
#include <string>
#include <string_view>
#include <variant>
#include <vector>

#include "dlrun/error.hpp"
#include "dlrun/launcher/gpu_claims.hpp"
#include "dlrun/launcher/host_list.hpp"
#include "dlrun/launcher/job_environment.hpp"
#include "dlrun/launcher/job_spec.hpp"
#include "dlrun/launcher/job_store.hpp"
#include "dlrun/launcher/policy_view.hpp"
#include "dlrun/launcher/process_identity.hpp"
#include "dlrun/launcher/rank_env.hpp"

namespace dlrun::launcher {
struct SbatchInput;
}

namespace dlrun::launcher {

// Only a job's owner (or root) may cancel or resize it: ConfigError naming the owner
// otherwise. A job from a store older than owners (-1) is anybody's who can open the store.
void check_owner(const JobRecord& job, std::string_view what);

class JobQueue {
 public:
  // Opens $DLRUN_HOME/jobs.db (creating DLRUN_HOME). `env` is this process's environment.
  explicit JobQueue(const Environment& env);

  JobStore& store() { return m_store; }
  const std::string& home() const { return m_home; }
  std::string run_dir(int64_t id) const;
  // Where job `id`'s logs go (output.log, rank-N.log): LOG_DIR/ID with the job file's
  // log_dir, else its run directory.
  std::string log_dir(int64_t id, const JobSpec& spec) const;
  // Where a recorded job's logs are: a `dlrun local`/`run` job's run directory, a submitted
  // job's log_dir(); its run directory when its file no longer parses (it never ran: its
  // supervisor wrote why there).
  std::string log_dir(const JobRecord& job) const;

  // Checks the job file (ConfigError with FILE:LINE:COL on any problem) and whether it
  // could ever run here, records it and starts its supervisor (or hands it to Slurm with
  // sbatch). `kind` overrides [scheduler] kind. Returns the job id.
  // `name` overrides the file's (dlrun submit --name: one file, a name per CI run).
  // `check_only`: every check, nothing submitted; returns 0 (dlrun submit --check).
  int64_t submit(const std::string& job_file, const std::string& kind = {}, const std::string& name = {},
                 bool check_only = false);
  // dlrun submit --resume JOB: queues an ended submitted job again as a new job, from the job
  // file, environment and name it was submitted with (the file itself may be gone), whose ranks
  // get the ended job's checkpoint directory: it goes on from its last checkpoint. `name`
  // overrides its name. Returns the new job's id, and the ended job's in *resumed.
  int64_t resubmit(const std::string& job_ref, const std::string& name, int64_t* resumed = nullptr);
  // Keeps what the job wrote to RUN_DIR/result.json with its record (at its end); nothing when
  // it wrote none. Errors of the store are the caller's (StoreUnavailable).
  void keep_result(int64_t id, const std::string& run_dir);
  // Where a submitted job's ranks keep their checkpoints (DLRUN_CHECKPOINT_DIR).
  std::string checkpoint_dir_of(const JobRecord& job);
  // The sbatch script a Slurm job file would be submitted with (dlrun submit --dry-run).
  std::string sbatch_script(const std::string& job_file, const std::string& kind = {});

  // Fixes the store after crashes (see above); adopts orphaned pending jobs. With `ask_slurm`,
  // also asks Slurm how its jobs stand (dlrun status); commands about other jobs leave it out
  // (a local submit waited 20 s for a controller that did not answer, about a job it never touched).
  // Returns how many of this machine's jobs wait (0 when the store could not be read now).
  int sweep(bool ask_slurm = true);
  // Starts `dlrun _schedule` (detached, with this queue's environment) when a goodput job is
  // pending or running and no live scheduler holds the lease (scheduler_loop.hpp). Called by
  // jobs' supervisors (with the environment the job was submitted with) only.
  void ensure_scheduler();

  // Starts `dlrun clean --auto` (detached) when the daily retention pass is due
  // (run_retention.hpp).
  void maybe_start_retention();

  // Blocks until the job ends (returns 0: its record says how), or until a signal of
  // `interrupt` arrives, which the caller blocks so that it waits for this (returns it; the
  // job goes on), or until `timeout_seconds` have passed, when given (returns k_timed_out).
  static constexpr int k_timed_out = -1;
  int wait(int64_t id, const sigset_t* interrupt = nullptr, std::optional<double> timeout_seconds = std::nullopt);

  // Stops a job: a pending one at once, a running one by SIGTERM to its supervisor (which
  // passes it on to the ranks), and SIGKILL after `grace` more seconds if it is still
  // running then, or at once with `force`. Returns the state it ended in, once nothing of
  // the job runs (no process carries its supervisor's token). Throws, leaving the state as
  // it is, when a signal cannot be sent or a process cannot be stopped; ConfigError for
  // another user's job (check_owner).
  // `why`: the reason a pending job is recorded with (a running one says how it stopped).
  JobState cancel(int64_t id, bool force, const std::string& why = "by dlrun cancel");

  // cancel() in two halves, for several jobs at once: begin_cancel() ends a pending job (and a
  // Slurm job) at once and returns its state, or sends a running job's supervisor its stop
  // signal and returns what finish_cancel() then waits for. Every job named gets its signal
  // before any is waited for: the jobs stop together, in the longest grace period rather than
  // their sum, and none is grown into GPUs another of them gives back meanwhile.
  struct CancelUnderWay {
    int64_t id = 0;
    bool force = false;
    std::string why;
    double grace = 0;
    ProcessIdentity supervisor;
    std::chrono::steady_clock::time_point deadline;  // SIGKILL to the supervisor then
  };
  std::variant<JobState, CancelUnderWay> begin_cancel(int64_t id, bool force, const std::string& why = "by dlrun cancel");
  JobState finish_cancel(const CancelUnderWay& cancel);

  // Sends SIGUSR1 or SIGUSR2 to a running job's ranks, which go on running (their program
  // decides what it means: a checkpoint before a deadline, say): through its supervisor, which
  // passes it on (a Slurm job: scancel --signal to its batch step, dlrun's). ConfigError for no
  // such job or another user's; Error with exit 1 for a job that is not running or whose
  // supervisor cannot be signalled, 75 (k_temp_failure) for one changing its size.
  void send_signal(int64_t id, int signal);

  // This machine's resources for the local scheduler.
  Capacity capacity() const;
  // CPU ranks at once: config.toml's [queue] cpu_slots, else DLRUN_CPU_SLOTS, else the usable
  // cores (queue_settings.hpp). Read anew at each call (a waiting job sees the file change).
  int cpu_slots() const;
  // Warns when another job that has not ended uses the checkpoint directory `spec` names: the
  // two would resume from each other's checkpoints (a job file submitted twice, a sweep).
  void warn_of_shared_checkpoint_dir(const JobSpec& spec);
  // A pending or running submitted job whose ranks keep their checkpoints in `dir`, if any.
  std::optional<JobRecord> live_job_with_checkpoint_dir(const std::string& dir);
  // The GPUs other stores' jobs hold now, each with who holds it (Capacity::gpus_elsewhere;
  // gpu_claims.hpp), without counting the GPUs again.
  std::map<std::string, std::string> gpus_elsewhere() const;
  // Only their ids: what changes as they are taken and let go, without looking up who.
  std::vector<std::string> gpu_ids_elsewhere() const;
  // Other stores' jobs that wait for GPUs (gpu_claims.hpp's GpuWant), oldest first.
  std::vector<GpuWantHolder> gpu_wants_elsewhere() const;
  // How many of the machine's `total` GPUs this store's jobs may use beside other stores' jobs
  // and `wants` (gpu_wants_elsewhere(); machine_share.hpp): `least_here`, what its running jobs
  // cannot give back.
  int capacity_beside_others(int total, int least_here, double starvation_seconds,
                             const std::vector<GpuWantHolder>& wants) const;

 private:
  // The GPUs other stores' jobs hold, by this machine's GPU ids (their UUIDs looked up once).
  GpuClaimsByGpu claims_elsewhere() const;
  mutable std::optional<GpuKeys> m_gpu_keys;

  void start_supervisor(int64_t id, const std::string& environment_blob);
  // Starts a supervisor that records `job` in the store and runs it; returns its id.
  int64_t start_supervised(const NewJob& job);
  // Double-forks `dlrun ARGS` (_supervise …, _schedule) with the environment; with
  // `job_bytes`, they are its stdin and what it writes to stdout is returned.
  std::string spawn_detached(const std::vector<std::string>& args, const std::string& environment_blob,
                             const std::string* job_bytes);
  JobSpec read_job_file(const std::string& job_file, const std::string& kind, std::string& text);
  SbatchInput sbatch_input(const JobSpec& spec, const std::string& id) const;
  void submit_to_slurm(int64_t id, const JobSpec& spec);
  // Slurm jobs' states come from Slurm: ask it, record what it says.
  void refresh_slurm_jobs();
  void refresh_slurm_job(const JobRecord& job);
  JobState cancel_slurm(const JobRecord& job, bool force);
  // This process's environment for asking Slurm about `job`, with the SLURM_CONF it was
  // submitted with when this shell has none.
  Environment slurm_environment(const JobRecord& job);
  Error not_stopped(int64_t id, const std::string& why);
  void signal_cancelled_supervisor(const CancelUnderWay& cancel, int sig);

  Environment m_env;
  std::string m_home;
  JobStore m_store;
  std::set<int64_t> m_unreachable_said;  // Slurm jobs whose unanswered query was warned about
  bool m_sweep_said = false;               // a sweep the store refused was warned about
};

// The body of `dlrun _supervise ID`: claim, wait for resources, run, record.
int run_submitted_job(int64_t id, const Environment& env);

// `dlrun _supervise --new`: records the job `dlrun submit` wrote to stdin (new_job_codec) and
// claims it, writing its id (or "error: …") to `answer`. Returns the id, 0 when nothing was
// recorded.
int64_t record_new_job(const Environment& env, std::string_view bytes, std::ostream& answer);

// A recorded job's file, parsed as it was submitted (with `dlrun submit --scheduler`'s kind).
// Throws ConfigError when it no longer parses.
JobSpec submitted_spec(const JobRecord& job);

// The hosts of a scheduler kind "ssh" job: its hosts string or its hostfile (read now).
std::vector<Host> hosts_of(const JobSpec& spec);

}  // namespace dlrun::launcher
