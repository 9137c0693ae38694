#include "shm_allreduce.hpp"

#include <fcntl.h>
#include <fmt/format.h>
#include <linux/futex.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <sys/types.h>
#include <time.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <csignal>
#include <cstring>

#include "dlrun/runtime_errors.hpp"

namespace dlrun::runtime {
namespace {

constexpr uint32_t k_magic = 0x444c5348;  // "DLSH"
constexpr int k_max_ranks = 256;
constexpr size_t k_align = 64;  // a cache line: slots never share one
constexpr int k_spins = 20000;  // about 20-50 µs of spinning before sleeping on the futex

size_t round_up(size_t n) {
  return (n + k_align - 1) / k_align * k_align;
}

long futex(std::atomic<uint32_t>* word, int op, uint32_t value, const timespec* timeout) {
  return ::syscall(SYS_futex, reinterpret_cast<uint32_t*>(word), op, value, timeout, nullptr, 0);
}

std::string errno_text() {
  return std::strerror(errno);
}

}  // namespace

struct ShmAllreduce::Header {
  uint32_t magic;
  int32_t world_size;
  uint64_t chunk_floats;
  alignas(k_align) std::atomic<uint32_t> arrived;     // ranks at the current barrier
  alignas(k_align) std::atomic<uint32_t> generation;  // barriers completed (futex word)
  alignas(k_align) std::atomic<int32_t> pids[k_max_ranks];
};

static_assert(std::atomic<uint32_t>::is_always_lock_free);

namespace {

size_t segment_bytes(int world_size, size_t chunk_floats) {
  // Header, one slot per rank, and two result buffers (alternating by chunk, so a rank still
  // copying out the last result never races one already reducing the next).
  return round_up(sizeof(ShmAllreduce::Header)) +
         (static_cast<size_t>(world_size) + 2) * round_up(chunk_floats * sizeof(float));
}

}  // namespace

ShmAllreduce::ShmAllreduce(std::string name, void* base, size_t bytes, int world_size)
    : m_name(std::move(name)),
      m_base(base),
      m_bytes(bytes),
      m_world_size(world_size),
      m_header(static_cast<Header*>(base)),
      m_chunk_floats(m_header->chunk_floats) {}

std::unique_ptr<ShmAllreduce> ShmAllreduce::create(const std::string& name, int world_size,
                                                   size_t chunk_floats) {
  if (world_size < 1 || world_size > k_max_ranks) {
    throw CommunicationError(
        fmt::format("shared-memory allreduce: {} ranks (1 to {})", world_size, k_max_ranks));
  }
  const size_t bytes = segment_bytes(world_size, chunk_floats);
  const int fd = ::shm_open(name.c_str(), O_RDWR | O_CREAT | O_EXCL | O_CLOEXEC, 0600);
  if (fd < 0) {
    throw CommunicationError(fmt::format("cannot create shared memory {}: {}", name, errno_text()));
  }
  // posix_fallocate, not just ftruncate: a /dev/shm too small for the segment (64 MiB in a
  // default Docker container) must fail here, where Gloo can take over, not with SIGBUS on
  // the first write past its end.
  int error = ::posix_fallocate(fd, 0, static_cast<off_t>(bytes));
  if (error != 0) {
    errno = error;
    const std::string why = errno_text();
    ::close(fd);
    ::shm_unlink(name.c_str());
    throw CommunicationError(fmt::format(
        "cannot size shared memory {} to {} bytes: {} (is /dev/shm full?)", name, bytes, why));
  }
  void* base = ::mmap(nullptr, bytes, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
  ::close(fd);
  if (base == MAP_FAILED) {
    ::shm_unlink(name.c_str());
    throw CommunicationError(fmt::format("cannot map shared memory {}: {}", name, errno_text()));
  }
  auto* header = new (base) Header{};
  header->world_size = world_size;
  header->chunk_floats = chunk_floats;
  header->arrived.store(0);
  header->generation.store(0);
  for (auto& pid : header->pids) pid.store(0);
  std::atomic_thread_fence(std::memory_order_release);
  header->magic = k_magic;
  return std::unique_ptr<ShmAllreduce>(new ShmAllreduce(name, base, bytes, world_size));
}

std::unique_ptr<ShmAllreduce> ShmAllreduce::open(const std::string& name, int world_size) {
  const int fd = ::shm_open(name.c_str(), O_RDWR | O_CLOEXEC, 0600);
  if (fd < 0) {
    throw CommunicationError(fmt::format("cannot open shared memory {}: {}", name, errno_text()));
  }
  struct stat info {};
  ::fstat(fd, &info);
  const auto bytes = static_cast<size_t>(info.st_size);
  void* base = bytes >= sizeof(Header)
                   ? ::mmap(nullptr, bytes, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0)
                   : MAP_FAILED;
  ::close(fd);
  if (base == MAP_FAILED) {
    throw CommunicationError(fmt::format("cannot map shared memory {}", name));
  }
  auto* header = static_cast<Header*>(base);
  if (header->magic != k_magic || header->world_size != world_size ||
      bytes < segment_bytes(world_size, header->chunk_floats)) {
    ::munmap(base, bytes);
    throw CommunicationError(
        fmt::format("shared memory {} is not a {}-rank segment", name, world_size));
  }
  return std::unique_ptr<ShmAllreduce>(new ShmAllreduce(name, base, bytes, world_size));
}

ShmAllreduce::~ShmAllreduce() {
  ::munmap(m_base, m_bytes);
}

void ShmAllreduce::join(int rank) {
  m_rank = rank;
  m_header->pids[rank].store(static_cast<int32_t>(::getpid()));
}

void ShmAllreduce::unlink() {
  ::shm_unlink(m_name.c_str());
}

float* ShmAllreduce::slot(int rank) const {
  const size_t slot_bytes = round_up(m_chunk_floats * sizeof(float));
  auto* first = static_cast<char*>(m_base) + round_up(sizeof(Header));
  return reinterpret_cast<float*>(first + static_cast<size_t>(rank) * slot_bytes);
}

float* ShmAllreduce::result(uint64_t generation) const {
  return slot(m_world_size + static_cast<int>(generation % 2));
}

// A sense-counting barrier: the last rank to arrive resets the count and advances the
// generation; the others spin on the generation, then sleep on it.
void ShmAllreduce::barrier() {
  Header& h = *m_header;
  const uint32_t generation = h.generation.load(std::memory_order_acquire);
  if (h.arrived.fetch_add(1, std::memory_order_acq_rel) + 1 ==
      static_cast<uint32_t>(m_world_size)) {
    h.arrived.store(0, std::memory_order_relaxed);
    h.generation.store(generation + 1, std::memory_order_release);
    futex(&h.generation, FUTEX_WAKE, INT32_MAX, nullptr);
    return;
  }
  for (int i = 0; i < k_spins; ++i) {
    if (h.generation.load(std::memory_order_acquire) != generation) return;
#if defined(__x86_64__)
    __builtin_ia32_pause();
#endif
  }
  const auto deadline = std::chrono::steady_clock::now() + m_timeout;
  const timespec nap{0, 50 * 1000 * 1000};  // wake up to look for dead peers
  while (h.generation.load(std::memory_order_acquire) == generation) {
    futex(&h.generation, FUTEX_WAIT, generation, &nap);
    if (h.generation.load(std::memory_order_acquire) != generation) return;
    for (int r = 0; r < m_world_size; ++r) {
      const int32_t pid = h.pids[r].load();
      if (pid > 0 && ::kill(pid, 0) != 0 && errno == ESRCH) {
        throw CommunicationError(
            fmt::format("rank {}: rank {} (pid {}) exited in the middle of a gradient allreduce",
                        m_rank, r, pid));
      }
    }
    if (std::chrono::steady_clock::now() > deadline) {
      throw CommunicationError(fmt::format(
          "rank {}: the gradient allreduce timed out after {:g} s waiting for the other ranks",
          m_rank, std::chrono::duration<double>(m_timeout).count()));
    }
  }
}

void ShmAllreduce::allreduce(float* data, size_t count, float scale) {
  for (size_t offset = 0; offset < count; offset += m_chunk_floats) {
    const size_t n = std::min(m_chunk_floats, count - offset);
    std::memcpy(slot(m_rank), data + offset, n * sizeof(float));
    barrier();  // every slot holds this chunk
    // This rank's share of the elements, summed over the slots in rank order (the same
    // result, bit for bit, on every rank).
    const size_t begin = n * static_cast<size_t>(m_rank) / static_cast<size_t>(m_world_size);
    const size_t end = n * static_cast<size_t>(m_rank + 1) / static_cast<size_t>(m_world_size);
    float* out = result(m_generation);
    const float* first = slot(0);
    for (size_t i = begin; i < end; ++i) out[i] = first[i];
    for (int r = 1; r < m_world_size; ++r) {
      const float* in = slot(r);
      for (size_t i = begin; i < end; ++i) out[i] += in[i];
    }
    if (scale != 1.0f) {
      for (size_t i = begin; i < end; ++i) out[i] *= scale;
    }
    barrier();  // every share is summed
    std::memcpy(data + offset, out, n * sizeof(float));
    ++m_generation;
  }
}

}  // namespace dlrun::runtime
