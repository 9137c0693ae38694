#pragma once
// Context: this process's place in the training world (rank, world size, run directory) and
// the process group the ranks talk through. dlrun::init() builds it from the environment
// `dlrun local` sets (docs/channels.md); without that environment it is a world of one and
// needs no store. Context is a cheap handle: copies share one state, which lives as long as
// the last copy. DataParallel, ElasticSampler and Checkpoint keep a copy.
//
// Stop requests: SIGTERM, SIGINT, SIGHUP or SIGUSR1 to any rank (or request_stop()) set a local flag.
// DataParallel::step() reduces it together with the step's gradients, so every rank sees
// stop_requested() turn true after the same step; checkpoint then and return exit_code()
// (75, exit_code::k_restart_me: "resume me from the checkpoint"). See docs/runtime.md.
//
// Thread-safety: a Context is used by the training thread. request_stop() may be called from
// any thread.

#include <c10/core/Device.h>

#include <chrono>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

namespace dlrun {

namespace runtime {
struct ContextState;
}

enum class Backend { automatic, gloo, nccl };

// What a rank trains on. automatic: what the launcher started it as (DLRUN_DEVICE: cuda with
// `dlrun local --gpus`, cpu with --nproc), or CUDA when that is unset and a GPU is visible.
enum class DeviceKind { automatic, cpu, cuda };

struct InitOptions {
  // How long rank 0 waits for all ranks to join the store, and the others wait for rank 0.
  std::chrono::milliseconds rendezvous_timeout{std::chrono::seconds(60)};
  // How long a collective may take before it fails (a rank died or hangs).
  std::chrono::milliseconds collective_timeout{std::chrono::minutes(10)};
  // automatic: NCCL when the rank's device is a GPU and this build has NCCL, otherwise Gloo.
  Backend backend = Backend::automatic;
  // The rank's device (Context::device()); cpu or cuda here overrides DLRUN_DEVICE.
  DeviceKind device = DeviceKind::automatic;
  // Install the SIGTERM/SIGINT/SIGHUP/SIGUSR1 stop handlers.
  bool handle_signals = true;
  // When every rank is on this host and gradients are on the CPU, average them through
  // shared memory instead of Gloo's sockets (docs/runtime.md). DLRUN_SHM_ALLREDUCE=0 turns it
  // off as well. Falls back to Gloo, on every rank, when the segment cannot be set up.
  bool shared_memory_allreduce = true;
};

class Context {
 public:
  explicit Context(std::shared_ptr<runtime::ContextState> state);

  int rank() const;
  int world_size() const;
  int local_rank() const;
  // Hosts the world spans (WORLD_SIZE / LOCAL_WORLD_SIZE, at least 1): the throughput model
  // of AdaptiveBatch prices cross-host gradient sync apart from on-host sync.
  int nodes() const;
  bool is_main() const { return rank() == 0; }
  // DLRUN_RESTART_COUNT: 0 on the first start, +1 on every restart by the launcher.
  int restart_count() const;
  // DLRUN_RUN_DIR, empty when not started by dlrun.
  const std::string& run_dir() const;
  // Where this job's checkpoints belong: DLRUN_CHECKPOINT_DIR (a submitted job's, job.toml's
  // checkpoint_dir), else RUN_DIR/checkpoints, else empty (started without dlrun).
  const std::string& checkpoint_dir() const;
  // "gloo", "nccl", or "none" for a world of one.
  std::string backend_name() const;
  // Where this rank's model and batches belong: cuda:N (its GPU, made the current CUDA
  // device by init()) or cpu. See InitOptions::device.
  c10::Device device() const;

  // True once all ranks agreed to stop (after the DataParallel::step() or poll_stop() that
  // carried the request). The same on every rank after the same step.
  bool stop_requested() const;
  // What main() should return after a stop: k_restart_me (75), or 0 if no stop was agreed.
  int exit_code() const;
  // Asks for a stop as a signal would; reduced at the next step like one.
  void request_stop();
  // True once this rank was asked to stop (a signal or request_stop()), before the ranks have
  // agreed on it: a loop that waits for something outside training can end its wait and take
  // the step that carries the request.
  bool stop_pending() const;
  // For loops without DataParallel: a tiny allreduce of the stop flags; returns stop_requested().
  bool poll_stop();

  // Blocking collectives over all ranks, for small bookkeeping (metrics, agreement).
  void barrier();
  // Sums each element over all ranks, in place.
  void all_reduce_sum(std::vector<double>& values);
  // Rank 0's value, on every rank.
  int64_t broadcast(int64_t value);

  // Internal: the shared state DataParallel and Checkpoint work with (runtime/src).
  runtime::ContextState& state() const { return *m_state; }
  const std::shared_ptr<runtime::ContextState>& shared_state() const { return m_state; }

 private:
  std::shared_ptr<runtime::ContextState> m_state;
};

// Reads RANK, WORLD_SIZE, MASTER_ADDR, MASTER_PORT (all or none), LOCAL_RANK,
// DLRUN_RUN_DIR and DLRUN_RESTART_COUNT; rank 0 hosts the c10d TCPStore, and all ranks
// create the process group. Throws EnvironmentError for a half-set environment and
// RendezvousTimeout when the ranks do not meet within options.rendezvous_timeout.
Context init(const InitOptions& options = {});

}  // namespace dlrun
