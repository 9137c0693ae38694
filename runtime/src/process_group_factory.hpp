#pragma once
// Creates the store and the process group for a world described by WorldEnv. Internal.

#include <c10/util/intrusive_ptr.h>

#include "dlrun/context.hpp"
#include "world_env.hpp"

namespace c10d {
class ProcessGroup;
class Store;
}  // namespace c10d

namespace dlrun::runtime {

// Rank 0 hosts a TCPStore at master_addr:master_port; every rank joins it, and rank 0 checks
// that all world_size ranks did within options.rendezvous_timeout (naming the missing ones).
c10::intrusive_ptr<c10d::Store> connect_store(const WorldEnv& world, const InitOptions& options);

struct Group {
  c10::intrusive_ptr<c10d::ProcessGroup> group;
  std::string backend;
};

// NCCL when asked for (or automatic and the rank has a GPU, cuda_index >= 0), Gloo otherwise.
Group create_process_group(const c10::intrusive_ptr<c10d::Store>& store, int rank, int world_size,
                           const std::string& bind_host, int cuda_index,
                           const InitOptions& options);

// Whether this build of the runtime can create NCCL groups.
bool nccl_compiled_in();

}  // namespace dlrun::runtime
