#include "shm_setup.hpp"

#include <fmt/format.h>
#include <unistd.h>

#include <cstdlib>
#include <random>
#include <string>
#include <torch/csrc/distributed/c10d/Store.hpp>
#include <vector>

#include "dlrun/log.hpp"
#include "dlrun/protocol.hpp"
#include "shm_allreduce.hpp"

namespace dlrun::runtime {
namespace {

// 2 Mi floats (8 MiB) per slot, world + 2 slots: 32 MiB for 2 ranks, 80 MiB for 8. A 25 MiB
// bucket takes 4 chunks (two barriers each, microseconds when the ranks keep pace).
constexpr size_t k_chunk_floats = size_t{2} << 20;
const std::string k_name_key = "dlrun/shm/name";
const std::string k_status_prefix = "dlrun/shm/status/";

std::string to_string(const std::vector<uint8_t>& bytes) {
  return std::string(bytes.begin(), bytes.end());
}
std::vector<uint8_t> to_bytes(const std::string& text) {
  return std::vector<uint8_t>(text.begin(), text.end());
}

}  // namespace

bool shm_allreduce_wanted(bool option) {
  const char* env = std::getenv(env::k_shm_allreduce);
  return option && !(env && std::string(env) == "0");
}

std::shared_ptr<ShmAllreduce> setup_shm_allreduce(const c10::intrusive_ptr<c10d::Store>& store,
                                                  int rank, int world_size,
                                                  std::chrono::milliseconds timeout) {
  std::shared_ptr<ShmAllreduce> shm;
  std::string failure;
  try {
    if (rank == 0) {
      const std::string name = fmt::format("/dlrun-{}-{:08x}", ::getpid(), std::random_device{}());
      shm = ShmAllreduce::create(name, world_size, k_chunk_floats);
      store->set(k_name_key, to_bytes(name));
    } else {
      store->wait({k_name_key}, timeout);
      shm = ShmAllreduce::open(to_string(store->get(k_name_key)), world_size);
    }
    shm->join(rank);
  } catch (const std::exception& e) {
    failure = e.what();
    shm.reset();
  }
  store->set(k_status_prefix + std::to_string(rank), to_bytes(failure.empty() ? "ok" : failure));
  std::vector<std::string> keys;
  for (int r = 0; r < world_size; ++r) keys.push_back(k_status_prefix + std::to_string(r));
  store->wait(keys, timeout);
  if (rank == 0 && shm) shm->unlink();  // all have answered: nothing opens it any more
  for (int r = 0; r < world_size; ++r) {
    const std::string status = to_string(store->get(keys[static_cast<size_t>(r)]));
    if (status == "ok") continue;
    if (rank == 0) {
      log::warn("rank {} cannot use shared memory for the gradient allreduce ({}): using Gloo", r,
                status);
    }
    return nullptr;
  }
  return shm;
}

}  // namespace dlrun::runtime
