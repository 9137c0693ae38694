#pragma once
// The state a Context handle shares: the world, the process group, the agreed stop.
// Internal: DataParallel and Checkpoint reach the process group through it; tests build
// ranks-as-threads worlds with make_context() over a shared in-memory store.

#include <c10/util/intrusive_ptr.h>

#include <atomic>
#include <memory>
#include <string>

#include "dlrun/context.hpp"
#include "sampler_agreement.hpp"

namespace c10d {
class ProcessGroup;
class Store;
}  // namespace c10d

namespace dlrun::runtime {

class ShmAllreduce;
class SerialWorker;

struct ContextState {
  int rank = 0;
  int world_size = 1;
  int local_rank = 0;
  int local_world_size = 1;
  int restart_count = 0;
  std::string run_dir;
  std::string checkpoint_dir;  // Context::checkpoint_dir()
  std::string backend = "none";
  int cuda_index = -1;                           // the rank's GPU; -1: it trains on the CPU
  c10::intrusive_ptr<c10d::Store> store;         // null for a world of one
  c10::intrusive_ptr<c10d::ProcessGroup> group;  // null for a world of one
  std::atomic<bool> local_stop{false};           // request_stop() on this rank
  bool agreed_stop = false;                      // all ranks know; set by a stop vote
  bool saved_after_stop = false;                 // a Checkpoint was saved since agreed_stop
  bool said_unsaved_stop = false;                // exit_code() warned of a stop without one
  bool uses_signals = true;                      // false in ranks-as-threads tests
  std::string progress_file;                     // DLRUN_PROGRESS_FILE (the launcher's watchdog)
  std::shared_ptr<ShmAllreduce> shm;             // all ranks on this host, CPU: gradient allreduce
  std::shared_ptr<SerialWorker> shm_worker;      // runs shm's allreduces off the autograd thread
  bool announced_stop_handling = false;          // run_files::k_handles_stop written
  SamplerTake last_take;                         // of the ElasticSamplers made with this Context
  bool local_stop_pending() const;
  // Rank 0, once per process: RUN_DIR/handles-stop says the program asks for stop requests,
  // so the launcher may resize it (the goodput scheduler only resizes such programs).
  void announce_stop_handling();
  // Tells the launcher's watchdog this rank finished a step: touches progress_file.
  void report_progress();
};

// A Context over an existing store (Gloo, 127.0.0.1): ranks-as-threads tests, embedding.
Context make_context(const c10::intrusive_ptr<c10d::Store>& store, int rank, int world_size,
                     const InitOptions& options = {});

}  // namespace dlrun::runtime
