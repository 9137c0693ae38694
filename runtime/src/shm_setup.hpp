#pragma once
// Sets up the shared-memory allreduce (shm_allreduce.hpp) for a world whose ranks all run on
// this host: rank 0 creates the segment under a fresh name it publishes in the store, the
// others open it, every rank reports success or failure in the store, and rank 0 unlinks the
// name once all have answered. All ranks reach the same verdict: either every rank has the
// segment, or none uses it (and Gloo reduces the gradients, as without it). Internal.

#include <c10/util/intrusive_ptr.h>

#include <chrono>
#include <memory>

namespace c10d {
class Store;
}

namespace dlrun::runtime {

class ShmAllreduce;

// Collective. nullptr when any rank could not map the segment (the reason is logged).
std::shared_ptr<ShmAllreduce> setup_shm_allreduce(const c10::intrusive_ptr<c10d::Store>& store,
                                                  int rank, int world_size,
                                                  std::chrono::milliseconds timeout);

// InitOptions::shared_memory_allreduce and DLRUN_SHM_ALLREDUCE together.
bool shm_allreduce_wanted(bool option);

}  // namespace dlrun::runtime
