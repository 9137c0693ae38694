#pragma once
// dlrun on a Slurm cluster (docs/slurm.md): the sbatch script dlrun writes for a job of
// [scheduler] kind "slurm", what Slurm's job states mean in dlrun's terms, and the Slurm
// commands dlrun runs (sbatch, scontrol, scancel, srun). Inside the allocation the script
// runs `dlrun _slurm-run`, which serves the same rendezvous as `dlrun run` and starts one
// `dlrun agent` per node with srun. The render/parse functions are pure; the rest run
// Slurm's commands (SLURM_CONF and PATH from the given environment). Thread-safe.

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "dlrun/launcher/cluster_job.hpp"
#include "dlrun/launcher/job_spec.hpp"
#include "dlrun/launcher/job_store.hpp"
#include "dlrun/launcher/rank_env.hpp"

namespace dlrun::launcher {

struct SbatchInput {
  std::string dlrun;     // dlrun's path on the cluster's nodes
  std::string job_id;    // dlrun's job id
  std::string run_dir;   // shared by the nodes
  std::string log_dir;   // output.log and the rank logs: the run directory, or job.toml's log_dir/ID
  std::string checkpoint_dir;
};

std::string render_sbatch_script(const JobSpec& spec, const SbatchInput& input);

struct SlurmJobInfo {
  std::string slurm_state;  // as Slurm says it: PENDING, RUNNING, COMPLETED …
  JobState state = JobState::pending;
  std::optional<int> exit_code;
  std::string reason;            // a pending job's too: what Slurm says it waits for
  std::optional<double> started_at;  // Slurm's StartTime (Unix seconds), once it started
};

// What a pending job's Slurm reason means when the job cannot start as it is (its request
// exceeds what its partition allows), or empty: Priority, Resources and the like pass.
std::string slurm_never_hint(const std::string& reason);

// Slurm's state names (squeue/scontrol/sacct) in dlrun's terms.
JobState map_slurm_state(std::string_view slurm_state);
// One line of `scontrol show job -o ID`.
std::optional<SlurmJobInfo> parse_scontrol_job(std::string_view line);

// `sbatch --parsable SCRIPT`; returns the Slurm job id. Throws Error with sbatch's words.
int64_t slurm_submit(const std::string& script_path, const Environment& env);

// What Slurm says of a job: its state (info); that it has no record of it (gone: scontrol no
// longer knows the id and there is no accounting record); or nothing, because Slurm could not
// be asked (why: the controller is down, scontrol is not in PATH). A job Slurm could not be
// asked about has not ended.
struct SlurmAnswer {
  std::optional<SlurmJobInfo> info;
  bool gone = false;
  std::string why;
};
// From the commands' results (pure): scontrol's, and sacct's when scontrol no longer knows it.
struct SlurmCommandResult {
  bool ran = false;  // started and exited 0
  std::string out, err;
};
SlurmAnswer interpret_slurm_query(const SlurmCommandResult& scontrol, const std::optional<SlurmCommandResult>& sacct);
SlurmAnswer slurm_query(int64_t slurm_id, const Environment& env);
// scancel: graceful (Slurm's SIGTERM, then SIGKILL after its KillWait), or SIGKILL now.
void slurm_cancel(int64_t slurm_id, bool force, const Environment& env);
// scancel --signal=SIG --batch: to the batch step, dlrun's, which passes it on to the ranks.
void slurm_signal(int64_t slurm_id, int signal, const Environment& env);

struct SlurmStepOptions {
  ClusterOptions cluster;  // group (command, grace, max_restarts, run_dir, prefix), gpu_slots
  int ranks_per_node = 1;
  std::string job_id;
  std::string workdir;  // the job's: sbatch --chdir goes to /tmp when it is missing on the node
};

// The body of `dlrun _slurm-run` inside the allocation.
int run_slurm_step(const SlurmStepOptions& options, const Environment& env);

}  // namespace dlrun::launcher
