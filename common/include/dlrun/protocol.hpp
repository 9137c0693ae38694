#pragma once
// The channels between the dlrun launcher and the processes it starts: the names of the
// environment variables going down to each rank, and the exit codes coming back up.
// Header-only and dependency-free so that the launcher (no LibTorch), the runtime (LibTorch)
// and user programs all spell them the same way. Written up in docs/channels.md; change
// both together.

namespace dlrun::env {

// torch.distributed env:// variables, set for every rank.
inline constexpr const char* k_rank = "RANK";
inline constexpr const char* k_local_rank = "LOCAL_RANK";
inline constexpr const char* k_world_size = "WORLD_SIZE";
inline constexpr const char* k_local_world_size = "LOCAL_WORLD_SIZE";
inline constexpr const char* k_node_rank = "NODE_RANK";
inline constexpr const char* k_group_rank = "GROUP_RANK";
inline constexpr const char* k_master_addr = "MASTER_ADDR";
inline constexpr const char* k_master_port = "MASTER_PORT";

// What torchrun (torch.distributed.elastic) sets as well, for scripts and libraries that read
// them: the number of nodes, the rank within the role (one role, "default": the global rank),
// the run's id, its restart count and budget, and the file where
// torch.distributed.elastic.multiprocessing.errors.record writes the rank's exception (read by
// dlrun when the rank fails: error_file.hpp).
inline constexpr const char* k_group_world_size = "GROUP_WORLD_SIZE";
inline constexpr const char* k_role_name = "ROLE_NAME";
inline constexpr const char* k_role_rank = "ROLE_RANK";
inline constexpr const char* k_role_world_size = "ROLE_WORLD_SIZE";
inline constexpr const char* k_torchelastic_run_id = "TORCHELASTIC_RUN_ID";
inline constexpr const char* k_torchelastic_restart_count = "TORCHELASTIC_RESTART_COUNT";
inline constexpr const char* k_torchelastic_max_restarts = "TORCHELASTIC_MAX_RESTARTS";
inline constexpr const char* k_torchelastic_error_file = "TORCHELASTIC_ERROR_FILE";

// Set by dlrun for every rank.
inline constexpr const char* k_run_dir = "DLRUN_RUN_DIR";
// RUN_DIR/result.json: a JSON object of the job's results, which dlrun keeps with its record.
inline constexpr const char* k_result_file = "DLRUN_RESULT_FILE";
inline constexpr const char* k_restart_count = "DLRUN_RESTART_COUNT";
inline constexpr const char* k_job_id = "DLRUN_JOB_ID";
// A token unique to the dlrun process that started the rank ("<pid>-<hex>"): inherited by
// whatever the rank starts, it finds processes that left the rank's process group, so that
// they are stopped with it (escaped_processes.hpp).
inline constexpr const char* k_supervisor_id = "DLRUN_SUPERVISOR_ID";
// Set for submitted jobs: where the job's checkpoints belong (job.toml checkpoint_dir,
// default RUN_DIR/checkpoints).
inline constexpr const char* k_checkpoint_dir = "DLRUN_CHECKPOINT_DIR";
// Set with --watchdog: a file the rank touches (or writes) after every step; a rank whose
// file has not changed for the watchdog's seconds counts as hung.
inline constexpr const char* k_progress_file = "DLRUN_PROGRESS_FILE";
// The elastic bounds of the job, MIN and MAX ranks ("2" and "4"); equal when not elastic.
inline constexpr const char* k_min_world_size = "DLRUN_MIN_WORLD_SIZE";
inline constexpr const char* k_max_world_size = "DLRUN_MAX_WORLD_SIZE";

// What the launcher started the ranks as: "cuda" with --gpus (one GPU per rank), "cpu" with
// --nproc. The runtime trains on that device and picks NCCL or Gloo by it; unset (torchrun,
// no launcher), it takes CUDA when CUDA is available.
inline constexpr const char* k_device = "DLRUN_DEVICE";

// Read by the runtime: "0" turns off the shared-memory gradient allreduce of ranks that
// share a host (CPU tensors), leaving it to Gloo.
inline constexpr const char* k_shm_allreduce = "DLRUN_SHM_ALLREDUCE";

// Set to "1" by `dlrun local` when its stderr is a terminal: a rank's output is a pipe, but
// dlrun shows its '\r' progress redraws in place, so a progress bar should be drawn.
inline constexpr const char* k_tty = "DLRUN_TTY";

// Set by dlrun unless the user already set them.
inline constexpr const char* k_omp_num_threads = "OMP_NUM_THREADS";
inline constexpr const char* k_python_unbuffered = "PYTHONUNBUFFERED";
inline constexpr const char* k_torchelastic_use_agent_store = "TORCHELASTIC_USE_AGENT_STORE";  // never given
inline constexpr const char* k_cuda_visible_devices = "CUDA_VISIBLE_DEVICES";

// Read by dlrun.
inline constexpr const char* k_home = "DLRUN_HOME";              // state, logs, run dirs
// The submitter's umask (octal), stored with a submitted job: its supervisor gives it to the
// ranks, as dlrun's own files are kept private (private_files.hpp).
inline constexpr const char* k_umask = "DLRUN_UMASK";
// Stored with a job queued by `dlrun submit --resume OLD`: the checkpoint directory of OLD, which
// the job's ranks get as DLRUN_CHECKPOINT_DIR (this variable itself never reaches them).
inline constexpr const char* k_resumed_checkpoint_dir = "DLRUN_RESUMED_CHECKPOINT_DIR";
// Given to the ranks of such a job: the jobs it goes on from ("12,15"), whose checkpoints are its
// own (the runtime warns of another job's checkpoint, not of these).
inline constexpr const char* k_resumed_jobs = "DLRUN_RESUMED_JOBS";
inline constexpr const char* k_fake_gpus = "DLRUN_FAKE_GPUS";    // tests: pretend N GPUs
inline constexpr const char* k_log_level = "DLRUN_LOG_LEVEL";    // debug|info|warn|error
inline constexpr const char* k_no_color = "NO_COLOR";            // https://no-color.org
inline constexpr const char* k_cpu_slots = "DLRUN_CPU_SLOTS";    // local scheduler: CPU ranks at once

}  // namespace dlrun::env

namespace dlrun::signals {

// To a rank: "stop at the next step all ranks agree on, checkpoint, exit with
// exit_code::k_restart_me" (a rescale). The runtime also treats SIGTERM so.
inline constexpr int k_stop_request = 10;  // SIGUSR1
// To a dlrun supervisor: "read RUN_DIR/resize.request" (sent by `dlrun resize`).
inline constexpr int k_resize_request = 12;  // SIGUSR2

}  // namespace dlrun::signals

namespace dlrun::run_files {

// Files a job's ranks leave in its run directory (DLRUN_RUN_DIR) for the launcher to read
// (docs/channels.md).
// The goodput model the runtime's AdaptiveBatch publishes at every fit (rank 0, atomically).
inline constexpr const char* k_goodput_model = "goodput-model.json";
// Written once by rank 0 when the program first asks Context::stop_requested(): it handles
// the stop request, so the goodput scheduler may resize it (docs/scheduling.md).
inline constexpr const char* k_handles_stop = "handles-stop";

}  // namespace dlrun::run_files

namespace dlrun::exit_code {

inline constexpr int k_success = 0;
// A failure with no code of its own to pass on (ranks that asked for restarts in a loop).
inline constexpr int k_failure = 1;
// Bad usage or input: nothing was started.
inline constexpr int k_usage = 2;
// A rank that exits with this code asks to be restarted from its checkpoint (a stop
// request agreed by all ranks, a rescale); the launcher does not count it as a failure.
// 75 is EX_TEMPFAIL in sysexits.h: "temporary failure, the user is invited to retry".
inline constexpr int k_restart_me = 75;
// dlrun resize of a job between two sizes: the same code, for dlrun's own command.
inline constexpr int k_temp_failure = 75;
// Other hosts could not be used: unreachable over ssh, or they never joined the
// rendezvous (EX_UNAVAILABLE).
inline constexpr int k_unavailable = 69;
// `dlrun wait --timeout`, `dlrun submit --wait --timeout`: the time given passed first, as timeout(1).
inline constexpr int k_timeout = 124;
// dlrun itself failed (could not spawn, internal error).
inline constexpr int k_internal = 70;  // EX_SOFTWARE
// Shell convention for a process ended by a signal: 128 + signal number.
inline constexpr int k_signal_base = 128;

}  // namespace dlrun::exit_code
