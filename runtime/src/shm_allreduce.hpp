#pragma once
// ShmAllreduce: sums float arrays over the ranks of one host through a shared-memory segment,
// for the gradient buckets of CPU training when every rank is on this machine. Gloo moves the
// same bytes through loopback TCP sockets and its threads; here each rank copies its data
// into its own slot, then reduces a disjoint 1/world of the elements over all slots, and
// copies the result back: three memory passes and two barriers per chunk, no syscalls when
// the ranks keep up with each other. docs/runtime.md has the measurements.
//
// The segment is created by rank 0 (shm_open) under a name the ranks agree on through the
// store, mapped by every rank, and unlinked as soon as all have mapped it: nothing is left in
// /dev/shm even when the ranks are killed. Barriers spin briefly, then sleep on a futex; a
// rank waiting for another one notices when that rank's process is gone (its pid is in the
// segment) or when the timeout passes, and throws CommunicationError naming it.
//
// Thread-safety: one caller at a time per rank (DataParallel's hook hands the calls to one
// SerialWorker thread); collective: every rank calls allreduce with the same count, in the
// same order. set_timeout() bounds each barrier (default 10 min).

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>

namespace dlrun::runtime {

class ShmAllreduce {
 public:
  // The creator (rank 0) makes a segment for `world_size` ranks with room for
  // `chunk_floats` floats per rank; the others open it by name. Throws CommunicationError.
  static std::unique_ptr<ShmAllreduce> create(const std::string& name, int world_size,
                                              size_t chunk_floats);
  static std::unique_ptr<ShmAllreduce> open(const std::string& name, int world_size);
  ~ShmAllreduce();
  ShmAllreduce(const ShmAllreduce&) = delete;
  ShmAllreduce& operator=(const ShmAllreduce&) = delete;

  // Takes this rank's place (records its pid); call once per rank after create/open.
  void join(int rank);
  // Removes the name from /dev/shm (rank 0, once every rank has opened it).
  void unlink();

  // data[i] = scale × Σ_ranks data[i], for i < count. Collective.
  void allreduce(float* data, size_t count, float scale = 1.0f);
  void set_timeout(std::chrono::milliseconds timeout) { m_timeout = timeout; }
  int world_size() const { return m_world_size; }

  struct Header;  // the segment's first bytes (shm_allreduce.cpp)

 private:
  ShmAllreduce(std::string name, void* base, size_t bytes, int world_size);
  void barrier();
  float* slot(int rank) const;
  float* result(uint64_t generation) const;

  std::string m_name;
  void* m_base;
  size_t m_bytes;
  int m_world_size;
  int m_rank = -1;
  Header* m_header;
  size_t m_chunk_floats;
  uint64_t m_generation = 0;  // chunks this rank has reduced
  std::chrono::milliseconds m_timeout{std::chrono::minutes(10)};
};

}  // namespace dlrun::runtime
