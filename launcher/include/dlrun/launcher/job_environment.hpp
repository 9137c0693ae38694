#pragma once
// What a submitted job keeps of its submitter's environment. The store holds it until the
// job runs, so it keeps only what a program needs to run as it would from the submitter's
// shell (docs/job-toml.md lists it): the paths and locale, the variables of CUDA, NCCL,
// Gloo, OpenMP, BLAS, PyTorch, Python, conda and dlrun; not the rest, where tokens and
// passwords live. A job file names more with export_env (names, NAME_PREFIX*, or "*").
// DLRUN_SUPERVISOR_ID is never kept: a job submitted from a rank is not that rank's.

#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "dlrun/launcher/rank_env.hpp"

namespace dlrun::launcher {

// Kept without being named in export_env.
bool exported_by_default(std::string_view name);

// `pattern` as export_env takes it: "NAME", "PREFIX*" or "*".
bool valid_export_pattern(std::string_view pattern);

Environment job_environment(const Environment& submitter, const std::vector<std::string>& export_env);

// What sbatch is run with for a Slurm job: sbatch hands its whole environment to the job
// (--export=ALL), so it gets the job's (job_environment) and the submitter's Slurm settings
// (SLURM_*, SBATCH_*), which sbatch itself reads.
Environment sbatch_environment(const Environment& submitter, const std::vector<std::string>& export_env);

// Only what export_env names of `env` (not what is kept by default): what a job's ranks on
// other hosts get of it (the paths and the rest belong to each host).
Environment exported_by_name(const Environment& env, const std::vector<std::string>& export_env);

// Why a job's environment may not set `name`, or none: dlrun sets it for each rank
// (plan_node_ranks), and a value given for it would be overridden without a word.
std::optional<std::string> reserved_env(const std::string& name);

// What `dlrun run -x` gives the ranks on every host besides dlrun's own variables: each
// NAME=VALUE as given; each NAME, PREFIX* or * as this shell (`here`) has it; and this shell's
// NCCL_* (as the DeepSpeed launcher sends them), which a run on one machine would have given
// every rank. ConfigError for a bad name, one dlrun sets for each rank, or a NAME this shell
// does not have.
Environment forwarded_environment(const Environment& here, const std::vector<std::string>& given);

// The PREFIX* items of `given` that match no variable of `here` (a typo, or a shell that lacks
// them): forwarded_environment passes nothing for them, which the user should hear.
std::vector<std::string> unmatched_env_patterns(const Environment& here, const std::vector<std::string>& given);

// The variables the command's words name ($NAME, ${NAME}: a `sh -c "… $DATA"`) that the
// submitter's shell sets but the job would not get (not kept, not in its [env]), in order, once
// each: a submitted job found them empty, without a word.
std::vector<std::string> variables_left_behind(const std::vector<std::string>& command, const Environment& submitter,
                                               const Environment& kept, const Environment& job_env);

// A job's environment as the store keeps it: NAME=VALUE\0… and back.
std::string encode_environment(const Environment& env);
Environment decode_environment(const std::string& blob);

}  // namespace dlrun::launcher
