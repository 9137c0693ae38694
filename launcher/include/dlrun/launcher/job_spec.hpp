#pragma once
// A job file (job.toml, written up in docs/job-toml.md): parsed and checked strictly, so
// that a typo never turns into a silently different job. Every problem is reported as
// `FILE:LINE:COL: what is wrong (hint)`, all of them at once. Pure (the caller reads the
// file); thread-safe.

#include <cstddef>
#include <map>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace dlrun::launcher {

// Limits of a job file (docs/job-toml.md, "Limits"), checked before and while it is parsed.
inline constexpr size_t k_max_job_file_bytes = 1024 * 1024;
inline constexpr size_t k_max_name_bytes = 255;   // name, [env] names, partition, time_limit, account
inline constexpr size_t k_max_path_bytes = 4096;  // PATH_MAX: workdir, the other paths, any one-line string
// One argument or NAME=value that reaches exec: Linux's MAX_ARG_STRLEN (131072) less the NUL.
inline constexpr size_t k_max_exec_string_bytes = 131071;
// command and [env] together (each string with its NUL): a quarter of the usual 2 MiB that
// exec takes, leaving the rest for the submitter's environment and dlrun's variables.
inline constexpr size_t k_max_exec_total_bytes = 512 * 1024;

// A rank count, fixed (min == max) or elastic (MIN:MAX).
struct RankRange {
  int min = 1;
  int max = 1;
  bool elastic() const { return min != max; }
};

// [scheduler] of kind "slurm": what goes into the sbatch script.
struct SlurmSpec {
  std::string partition;
  int nodes = 1;
  int ranks_per_node = 1;
  int gpus_per_node = 0;  // > 0: one rank per GPU
  std::string time_limit;
  std::string account;
  std::vector<std::string> sbatch_options;
};

// How a local GPU job shares the machine (docs/scheduling.md): started and resized by the
// goodput scheduler, or queued in order and kept at the size it started with.
enum class SharePolicy { fifo, goodput };

struct JobSpec {
  std::string name;
  std::vector<std::string> command;
  std::string workdir;  // absolute
  std::map<std::string, std::string> env;
  std::vector<std::string> export_env;  // more of the submitter's environment to keep (job_environment.hpp)
  std::optional<RankRange> nproc;
  std::optional<RankRange> gpus;
  std::vector<std::string> gpu_ids;  // gpus = [0, 2]: these devices exactly
  int max_restarts = 0;
  double grace = 30;
  double watchdog = 0;         // seconds without progress before a rank counts as hung; 0 = off
  double time_limit = 0;       // [scheduler] time_limit in seconds (0: none); Slurm gets its text
  std::string checkpoint_dir;  // absolute or empty (default: RUN_DIR/checkpoints); may hold {job_id}
  std::string log_dir;         // absolute or empty (default: RUN_DIR)
  std::string scheduler = "local";
  // [scheduler] policy; when not given: goodput for an elastic local GPU job (gpus =
  // "MIN:MAX"), fifo otherwise.
  SharePolicy policy = SharePolicy::fifo;
  // scheduler kind "ssh": the hosts (as --hosts) or a hostfile (absolute), and whether
  // each slot is a GPU. The hostfile is read by the caller (this parser does no I/O).
  std::string hosts;
  std::string hostfile;
  bool gpu_slots = false;
  std::string ssh_config;  // ssh -F FILE (absolute), optional
  std::string remote_dlrun;  // dlrun's path on the other hosts (--remote-dlrun); empty: this one's
  std::optional<double> connect_timeout, join_timeout;  // seconds (--connect-timeout, --join-timeout)
  SlurmSpec slurm;

  // Ranks to start when the scheduler can give `max`.
  int ranks() const { return gpus ? gpus->max : nproc ? nproc->max : 0; }
  bool remote() const { return scheduler == "ssh"; }
  bool on_slurm() const { return scheduler == "slurm"; }
};

// `path` is used in messages; relative directories are resolved against `base_dir` (the
// job file's directory). Throws ConfigError listing every problem, one per line.
// `kind_override` (from `dlrun submit --scheduler`) replaces [scheduler] kind. `stored`: a
// recorded job's file read again, whose name and [env] are taken as they were recorded (an
// older dlrun accepted names, and [env] entries that dlrun sets, that new files are refused). `home`: what a leading ~ in a directory
// stands for (a recorded job: its submitter's HOME); by default this process's HOME.
JobSpec parse_job_spec(std::string_view text, const std::string& path, const std::string& base_dir,
                       const std::string& kind_override = {}, bool stored = false,
                       const std::optional<std::string>& home = std::nullopt);

// The job's checkpoint directory: checkpoint_dir with each {job_id} replaced by the job's number
// (one job file, a directory per job: a sweep's jobs resumed from each other's checkpoints), or
// RUN_DIR/checkpoints.
std::string checkpoint_dir_of(const JobSpec& spec, const std::string& job_id, const std::string& run_dir);

// The keys accepted at the top level and in each table, for messages and docs.
const std::vector<std::string>& job_spec_keys(std::string_view table);

}  // namespace dlrun::launcher
