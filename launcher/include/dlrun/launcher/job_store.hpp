#pragma once
// The jobs submitted on this machine, in SQLite ($DLRUN_HOME/jobs.db; schema in
// docs/job-store.md). Every state change is one transaction, so any dlrun process may be
// killed at any moment without losing a job or corrupting the store. Many processes use
// the store at once (submit, status, each job's supervisor): WAL mode and a busy timeout
// make them wait for each other instead of failing. One JobStore per thread.

#include <sqlite3.h>

#include <algorithm>
#include <cstdint>
#include <functional>
#include <optional>
#include <string>
#include <vector>

#include "dlrun/error.hpp"
#include "dlrun/launcher/allocation_event.hpp"
#include "dlrun/launcher/job_metrics.hpp"
#include "dlrun/launcher/job_ref.hpp"
#include "dlrun/launcher/process_identity.hpp"
#include "dlrun/launcher/scheduling_policy.hpp"

namespace dlrun::launcher {

// The store could not be read or written now, though it is a store: another process holds
// its lock past the busy timeout (30 s), the disk is full, an I/O error. The same call may
// succeed later; a job's supervisor keeps what it has to record until it does. Exit 75 (try
// again) where it ends a command.
class StoreUnavailable : public Error {
 public:
  explicit StoreUnavailable(const std::string& message) : Error(message, exit_code::k_temp_failure) {}
};
// Throws StoreUnavailable for a transient SQLite result code (BUSY, LOCKED, FULL, IOERR), Error
// otherwise; `where` starts the message ("job store /h/jobs.db").
[[noreturn]] void throw_store_error(sqlite3* db, int rc, const std::string& where);
// Calls `write` until the store takes it: while it throws StoreUnavailable, says so once
// (naming `what`) and tries again every `every_seconds`, for at most `for_seconds`; then, or for
// any other error, the exception goes on. For what only this process can record (a job's end:
// a supervisor that gave up would leave its job to be called lost).
void write_when_store_takes_it(const std::string& what, const std::function<void()>& write, double every_seconds = 5,
                               double for_seconds = 3600);

enum class JobState { pending, running, rescaling, succeeded, failed, cancelled };

std::string to_string(JobState state);  // "PENDING" …
std::optional<JobState> parse_job_state(const std::string& text);
bool is_terminal(JobState state);
// How a job that ran ended: SUCCEEDED on exit code 0, CANCELLED when a stop signal ended it,
// FAILED otherwise.
JobState state_after(int exit_code, bool stopped_by_signal);

// Where a job came from: `dlrun submit` (a detached supervisor runs it when its turn comes), or
// a run in the foreground, `dlrun local` or `dlrun run`, which is its own supervisor and is
// recorded from its start to its end (foreground_job.hpp). One numbering for all of them.
enum class JobOrigin { submit, local, run };
std::string to_string(JobOrigin origin);  // "submit", "local", "run"
JobOrigin parse_job_origin(const std::string& text);

struct NewJob {
  std::string name;
  std::string spec_text;  // the job file as submitted
  std::string spec_path;  // its path, for messages
  std::string base_dir;   // directory relative paths in it are resolved against
  std::string environment;  // the submitter's environment, NAME=VALUE\0 …
  ResourceRequest request;
  bool slurm = false;  // queued on a Slurm cluster: no supervisor here, state from Slurm
  int owner_uid = -1;  // who submitted it (-1: a store from before owners were kept)
  // A foreground run keeps its command line (dlrun's words after the verb, a JSON array) in
  // spec_text and its working directory in base_dir: `--resume` runs it again from them.
  JobOrigin origin = JobOrigin::submit;
};

struct JobRecord {
  int64_t id = 0;
  std::string name;
  JobState state = JobState::pending;
  NewJob submitted;
  Allocation allocation;  // while or after running
  double submitted_at = 0, started_at = 0, ended_at = 0;  // Unix seconds; 0 = not yet
  std::optional<int> exit_code;
  std::string reason;  // why it failed or was cancelled; a pending Slurm job: what Slurm says it waits for
  int restarts = 0;    // restarts after a failure (they spend max_restarts)
  int resizes = 0;     // restarts at a new size (dlrun resize, the scheduler)
  int requested_restarts = 0;  // restarts the ranks asked for (all exited 75): they spend nothing
  std::optional<int> failed_rank;  // the rank whose failure ended it, if one did
  MetricsSnapshot final_metrics;   // its training metrics when it ended (job_metrics.hpp), if any
  std::optional<std::string> result;  // what it said it achieved when it ended (job_result.hpp): JSON
  std::string run_dir;
  ProcessIdentity supervisor;
  int64_t slurm_id = 0;  // the Slurm job id of a job submitted to Slurm
  int pinned = 0;        // ranks a user set with `dlrun resize` (the scheduler keeps them); 0: none
  double resized_at = 0; // Unix seconds of its last resize; 0: never
  // Since when it runs at its present size (its start or its last resize).
  double sized_since() const { return std::max(started_at, resized_at); }
};

// The head of this machine's queue of GPU jobs (`uses_gpus`) or of CPU jobs among `jobs`: the
// oldest pending fifo job whose ranks run here (not on other hosts), which JobStore::try_start
// starts first; -1 when none waits. The two kinds queue apart (neither uses the other's). A
// goodput job is no place in it: the scheduler starts those, weighing the head among them (a
// fifo job waited behind a goodput job that did not fit while later goodput jobs started).
int64_t queue_head(const std::vector<JobRecord>& jobs, bool uses_gpus);

// What a job's end leaves beside its state, exit code and reason.
struct EndDetails {
  std::optional<int> failed_rank;
  MetricsSnapshot metrics;  // the last ones it wrote (smoothed as dlrun status shows them)
  std::optional<double> ended_at;  // when it ended (Unix seconds), if not now: an end the store took late
};

// What sweep() found: pending jobs that lost (or never got) their supervisor.
struct Orphans {
  std::vector<int64_t> pending_without_supervisor;
  std::vector<int64_t> marked_lost;
  std::vector<int64_t> ended_unrecorded;  // recorded now as their run directory says they ended
  int pending = 0;  // this machine's jobs that wait (those of other users too)
};

class JobStore {
 public:
  // Opens (creating if needed) the store at `path`. Throws Error when it cannot.
  explicit JobStore(const std::string& path);
  ~JobStore();
  JobStore(const JobStore&) = delete;
  JobStore& operator=(const JobStore&) = delete;

  // Records a PENDING job, with its supervisor when given (one statement: the job never
  // exists without it).
  int64_t submit(const NewJob& job, const ProcessIdentity& supervisor = {});
  std::optional<JobRecord> get(int64_t id);
  // Jobs in id order: all of them, or the active ones plus the `recent` that ended last. A
  // listing: submitted.spec_text, base_dir and environment are left empty (get() has them).
  std::vector<JobRecord> list(bool all, int recent);

  // Makes `me` the job's supervisor unless a live one has it. False: someone else does.
  bool claim(int64_t id, const ProcessIdentity& me);
  // A number that changes whenever another connection (another dlrun process) commits a change
  // to the store: SQLite's data_version, read without taking the write lock. A waiting job
  // looks at the queue again only when it changed (or now and then): each look at it takes
  // the lock, and a sweep of hundreds of waiting jobs used a third of a core doing so.
  int64_t changes_by_others();
  // If the job is the oldest pending one and its resources are free: RUNNING with them.
  // `goodput_starving_before` (Unix seconds, 0: no guard): a fifo GPU job does not start while
  // an older goodput job submitted before then waits (it has waited past starvation_seconds:
  // the GPUs that come free are its, as the scheduler gives them).
  std::optional<Allocation> try_start(int64_t id, const Capacity& capacity, const std::string& run_dir,
                                      double goodput_starving_before = 0);
  // Restarts after failures, restarts at a new size, and restarts the ranks asked for.
  void set_restarts(int64_t id, int restarts, int resizes, int requested);
  // A job handed to Slurm: its Slurm id and run directory. False: the job had been cancelled
  // while sbatch ran (cancel_unsubmitted), and its Slurm job is the caller's to cancel.
  bool set_slurm_id(int64_t id, int64_t slurm_id, const std::string& run_dir);
  // An elastic job's new size: its allocation becomes `world` ranks if that fits beside
  // the other running jobs (GPUs it holds are kept first). nullopt: it does not fit.
  // `cause` is recorded with the change ("resize", "scheduler").
  std::optional<Allocation> resize_allocation(int64_t id, int world, const Capacity& capacity,
                                              const std::string& cause = "resize");
  // Sets a running job's allocation (a shrink once its ranks have stopped, an undo); the same
  // allocation again records nothing.
  void set_allocation(int64_t id, const Allocation& allocation, const std::string& cause);

  // The goodput scheduler's side (job_store_schedule.cpp; docs/scheduling.md).
  // A PENDING job starts RUNNING with exactly `ranks` (its supervisor, waiting, sees it),
  // when they are free; nullopt otherwise.
  std::optional<Allocation> start_scheduled(int64_t id, int ranks, const Capacity& capacity,
                                            const std::string& run_dir);
  // `dlrun resize` pins a job at its size (0: the scheduler may size it again).
  void set_pinned(int64_t id, int ranks);
  // Every change of a local job's allocation since `since` (Unix seconds), in order: its
  // start, resizes, its end (ranks 0).
  std::vector<AllocationEvent> allocation_history(double since = 0);
  // One scheduler at a time: `me` holds the lease unless a live process does. True: `me`
  // holds it now.
  bool take_scheduler_lease(const ProcessIdentity& me);
  // Whether a pending or running job has policy = "goodput" (it needs a scheduler).
  bool has_active_goodput_jobs();
  // The live holder of the lease, if any.
  std::optional<ProcessIdentity> scheduler_lease_holder();
  void release_scheduler_lease(const ProcessIdentity& me);
  // A run in the foreground (job_store_foreground.cpp): recorded RUNNING with `supervisor`
  // (the dlrun local or dlrun run process) from the start, so it is never PENDING.
  int64_t record_foreground(const NewJob& job, const ProcessIdentity& supervisor);
  // Its ranks, GPUs, run directory and elastic bounds, once its plan has them (an allocation
  // event).
  void set_foreground_start(int64_t id, const Allocation& allocation, const std::string& run_dir, int min_ranks,
                            int max_ranks);
  // An ended job taken up again under its own number (`dlrun local --resume`): RUNNING with
  // `supervisor`, its end, exit code, reason and final metrics cleared; `spec_text` replaces
  // the command line it keeps. False (nothing changed) when the job is not ended.
  bool reopen(int64_t id, const ProcessIdentity& supervisor, const std::string& spec_text);
  // GPUs that running jobs other than `except` hold (their allocations), in id order.
  std::vector<std::string> gpus_held(const std::vector<int64_t>& except);
  // Removes a job that never ran (its plan was refused) and its allocation events.
  void forget(int64_t id);
  // The newest job called `name`, if any; with NamedJob::active_first, the newest of those that
  // have not ended, if any has not (`dlrun cancel train` while an older "train" runs and a newer
  // one was cancelled).
  std::optional<JobRecord> find_by_name(const std::string& name, NamedJob which = NamedJob::newest);
  // The number of this user's newest job (submitted or run), if any.
  std::optional<int64_t> newest_of_mine();
  // Jobs that ended before `before` (Unix seconds), newest first, except the `keep` newest
  // ended jobs: what retention may clean (run_retention.hpp).
  std::vector<JobRecord> ended_before(double before, int keep);

  // RUNNING ⇄ RESCALING while a resize is under way.
  void set_rescaling(int64_t id, bool rescaling);
  // A Slurm job seen running: its start time is `at` (Slurm's), else now. Its pending reason goes.
  void mark_running(int64_t id, std::optional<double> at = std::nullopt);
  // What Slurm says a pending job waits for (shown by dlrun status until it runs).
  void note_pending_reason(int64_t id, const std::string& reason);
  void finish(int64_t id, JobState state, std::optional<int> exit_code, const std::string& reason,
              const EndDetails& details = {});
  // The metrics of a job that ended without its supervisor's word (a lost one).
  void set_final_metrics(int64_t id, const MetricsSnapshot& metrics);
  // When a lost job ended, as its run directory tells it (the sweep that noticed came later):
  // `at` if it lies between its start and the end recorded.
  void set_lost_end(int64_t id, double at);
  // The stored environments (encoded, as submitted) of the jobs whose environment holds `bytes`:
  // one query, where reading every job whole to look took one per job.
  std::vector<std::pair<int64_t, std::string>> environments_holding(const std::string& bytes);
  // What the job said it achieved (job_result.hpp), kept when it ends.
  void set_result(int64_t id, const std::string& json);
  // PENDING → CANCELLED in one step, with the exit code a cancelled job gets (128 + the
  // signal that cancelled it); false if the job was not pending.
  bool cancel_pending(int64_t id, const std::string& reason, int exit_code);
  // The same for a Slurm job whose sbatch has not answered yet (no Slurm id recorded): false
  // if it has one by now, or is not pending. Its submitter cancels what sbatch queued.
  bool cancel_unsubmitted(int64_t id, const std::string& reason, int exit_code);
  // RUNNING → PENDING before its ranks started: its resources are free again and `reason` says
  // why it waits. False if the job was not RUNNING.
  bool requeue(int64_t id, const std::string& reason);

  // Running jobs whose supervisor died become FAILED ("lost") and free their resources, unless
  // `recorded_end` knows how they ended (their run directory's job.json: a supervisor that
  // ended while the store could not be written); pending jobs without a live supervisor are
  // returned for adoption. Slurm jobs have no supervisor here and are left alone.
  struct RecordedEnd {
    JobState state;
    int exit_code;
    std::string reason;
    std::optional<int> failed_rank;
    std::optional<double> ended_at;
  };
  using EndReader = std::function<std::optional<RecordedEnd>(const JobRecord&)>;
  Orphans sweep(double pending_grace_seconds = 3.0, const EndReader& recorded_end = {});

 private:
  class Statement;
  void exec(const char* sql);
  // PENDING → CANCELLED where the job also meets `condition` (SQL after AND, or empty).
  bool cancel_where(int64_t id, const std::string& reason, int exit_code, const char* condition);
  // WAL mode and the schema; SQLITE_OK or the failing statement's code (`error` says what).
  int open_schema(std::string& error);
  // The store's user_version (0: a store from before versions were kept); -1 if unreadable.
  int schema_version();
  bool has_jobs_table();
  void begin_immediate();
  void commit();
  void rollback();
  JobRecord read_row(Statement& statement);
  // The final_* columns' values at positions first … first+3.
  static void bind_metrics(Statement& statement, int first, const MetricsSnapshot& metrics);
  Usage usage_locked();
  // Within a transaction: RUNNING with `allocation`, its start recorded.
  void start_locked(int64_t id, const Allocation& allocation, const std::string& run_dir);
  // Within a transaction: the allocation, its time and the event.
  void write_allocation_locked(int64_t id, const Allocation& allocation, const std::string& cause);
  // Within a transaction: a running local job's end, as an event of 0 ranks.
  void record_release_locked(int64_t id);

  sqlite3* m_db = nullptr;
  std::string m_path;
};

double now_seconds();

}  // namespace dlrun::launcher
