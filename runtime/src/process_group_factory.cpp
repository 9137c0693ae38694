#include "process_group_factory.hpp"

#include <fmt/format.h>
#include <netdb.h>
#include <sys/socket.h>

#include <algorithm>
#include <chrono>
#include <cstdlib>
#include <string>
#include <torch/csrc/distributed/c10d/PrefixStore.hpp>
#include <torch/csrc/distributed/c10d/ProcessGroupGloo.hpp>
#include <torch/csrc/distributed/c10d/TCPStore.hpp>
#include <torch/version.h>
#ifdef DLRUN_WITH_NCCL
#include <torch/csrc/distributed/c10d/ProcessGroupNCCL.hpp>
#endif

#include "dlrun/log.hpp"
#include "dlrun/runtime_errors.hpp"
#include "error_text.hpp"
#include "port_probe.hpp"

namespace dlrun::runtime {
namespace {

// Gloo's own variable for the interface to bind to (as in torch.distributed).
constexpr const char* k_gloo_socket_ifname = "GLOO_SOCKET_IFNAME";
constexpr const char* k_joined_prefix = "dlrun/joined/";
constexpr const char* k_all_joined = "dlrun/all_joined";

bool is_loopback(const std::string& host) {
  return host == "localhost" || host.rfind("127.", 0) == 0 || host == "::1";
}

std::string missing_ranks(c10d::Store& store, int world_size) {
  std::string out;
  int shown = 0, missing = 0;
  for (int r = 0; r < world_size; ++r) {
    if (store.check({k_joined_prefix + std::to_string(r)})) continue;
    ++missing;
    if (shown < 16) {
      out += (shown++ ? ", " : "") + std::to_string(r);
    }
  }
  if (missing > shown) out += fmt::format(" and {} more", missing - shown);
  return out;
}

void wait_for_all_ranks(c10d::Store& store, const WorldEnv& world, const InitOptions& options) {
  store.set(k_joined_prefix + std::to_string(world.rank), std::vector<uint8_t>{1});
  const auto seconds = std::chrono::duration<double>(options.rendezvous_timeout).count();
  if (world.rank == 0) {
    std::vector<std::string> keys;
    for (int r = 0; r < world.world_size; ++r) keys.push_back(k_joined_prefix + std::to_string(r));
    try {
      store.wait(keys, options.rendezvous_timeout);
    } catch (const std::exception&) {
      throw RendezvousTimeout(fmt::format(
          "rank(s) {} of {} did not join the store at {}:{} within {:g} s: check that they "
          "started (their logs in the run directory) and can reach this host",
          missing_ranks(store, world.world_size), world.world_size, world.master_addr,
          world.master_port, seconds));
    }
    store.set(k_all_joined, std::vector<uint8_t>{1});
    return;
  }
  try {
    store.wait({k_all_joined}, options.rendezvous_timeout);
  } catch (const std::exception&) {
    throw RendezvousTimeout(fmt::format(
        "rank {}: not all {} ranks joined the store at {}:{} within {:g} s (rank 0 names the "
        "missing ones in its log)",
        world.rank, world.world_size, world.master_addr, world.master_port, seconds));
  }
}

std::shared_ptr<::gloo::transport::Device> gloo_device(const std::string& bind_host) {
  if (const char* ifname = std::getenv(k_gloo_socket_ifname); ifname && *ifname) {
    return c10d::ProcessGroupGloo::createDeviceForInterface(ifname);
  }
  if (is_loopback(bind_host)) return c10d::ProcessGroupGloo::createDeviceForHostname("127.0.0.1");
  return c10d::ProcessGroupGloo::createDefaultDevice();
}

// LibTorch 1.x: ProcessGroupGloo/NCCL are process groups. 2.x: they are backends, which a
// ProcessGroup dispatches to by the tensors' device: NCCL takes CUDA tensors; Gloo takes CPU
// tensors, and CUDA ones too when a GPU rank has no NCCL.
template <typename Backend>
c10::intrusive_ptr<c10d::ProcessGroup> as_group(const c10::intrusive_ptr<c10d::Store>& store,
                                                int rank, int world_size,
                                                c10::intrusive_ptr<Backend> backend, bool nccl,
                                                [[maybe_unused]] int cuda_index) {
#if TORCH_VERSION_MAJOR < 2
  (void)store;
  (void)rank;
  (void)world_size;
  (void)nccl;
  return backend;
#else
  auto group = c10::make_intrusive<c10d::ProcessGroup>(store, rank, world_size);
  using Type = c10d::ProcessGroup::BackendType;
  const Type type = nccl ? Type::NCCL : Type::GLOO;
  if (nccl) {
    group->setBoundDeviceId(
        c10::Device(c10::DeviceType::CUDA, static_cast<c10::DeviceIndex>(cuda_index)));
  } else {
    group->setBackend(c10::DeviceType::CPU, type, backend);
  }
  if (cuda_index >= 0) group->setBackend(c10::DeviceType::CUDA, type, backend);
  group->setDefaultBackend(type);
  return group;
#endif
}

}  // namespace

c10::intrusive_ptr<c10d::Store> connect_store(const WorldEnv& world, const InitOptions& options) {
  // Under torchrun (2.x) its agent hosts the store at MASTER_ADDR:MASTER_PORT for every rank,
  // rank 0 included, and keeps it across restarts: rank 0 hosting one of its own found the port
  // taken. Each attempt's keys then go under a prefix of their own, as torch.distributed's do.
  const char* agent_store = std::getenv("TORCHELASTIC_USE_AGENT_STORE");
  const bool agent_hosts = agent_store && std::string(agent_store) == "True";
  c10d::TCPStoreOptions store_options;
  store_options.port = world.master_port;
  store_options.isServer = world.rank == 0 && !agent_hosts;
  store_options.numWorkers = world.world_size;
  store_options.waitWorkers = false;  // we wait ourselves, to name the missing ranks
  store_options.timeout = options.rendezvous_timeout;
  c10::intrusive_ptr<c10d::Store> store;
  const auto seconds = std::chrono::duration<double>(options.rendezvous_timeout).count();
  if (!store_options.isServer) {
    // One timeout in all: the store gets what is left of it (it waited a whole second one).
    const auto deadline = std::chrono::steady_clock::now() + options.rendezvous_timeout;
    if (!wait_until_listening(world.master_addr, world.master_port, options.rendezvous_timeout)) {
      // A name that does not resolve is said as such (nothing could listen at it).
      addrinfo hints{};
      hints.ai_socktype = SOCK_STREAM;
      addrinfo* found = nullptr;
      const int resolved = ::getaddrinfo(world.master_addr.c_str(), nullptr, &hints, &found);
      if (found) ::freeaddrinfo(found);
      throw RendezvousTimeout(fmt::format(
          "rank {} could not reach the store at {}:{} within {:g} s: check that rank 0 is running "
          "and MASTER_ADDR/MASTER_PORT are right ({})",
          world.rank, world.master_addr, world.master_port, seconds,
          resolved == 0 ? std::string("nothing listens there")
                        : fmt::format("MASTER_ADDR does not resolve: {}", ::gai_strerror(resolved))));
    }
    const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(deadline - std::chrono::steady_clock::now());
    store_options.timeout = std::max(left, std::chrono::milliseconds(1000));
  }
  try {
    store = c10::make_intrusive<c10d::TCPStore>(world.master_addr, store_options);
    // The store's own waits (Gloo's rendezvous through it) get the whole timeout again.
    store->setTimeout(options.rendezvous_timeout);
    if (agent_hosts) {
      const char* restart = std::getenv("TORCHELASTIC_RESTART_COUNT");
      store = c10::make_intrusive<c10d::PrefixStore>(
          fmt::format("/dlrun/attempt_{}", restart && *restart ? restart : "0"), store);
    }
  } catch (const std::exception& e) {
    if (store_options.isServer) {
      throw RendezvousTimeout(fmt::format(
          "rank 0 could not host the store at {}:{} ({}): is the port in use? By this program itself "
          "when it called torch.distributed.init_process_group() too (dlrun's init replaces it); dlrun "
          "local picks a free one; set MASTER_PORT to another port otherwise",
          world.master_addr, world.master_port, runtime::message_of(e)));
    }
    throw RendezvousTimeout(fmt::format(
        "rank {} could not reach the store at {}:{} within {:g} s: check that rank 0 is running "
        "and MASTER_ADDR/MASTER_PORT are right ({})",
        world.rank, world.master_addr, world.master_port, seconds, runtime::message_of(e)));
  }
  wait_for_all_ranks(*store, world, options);
  return store;
}

bool nccl_compiled_in() {
#ifdef DLRUN_WITH_NCCL
  return true;
#else
  return false;
#endif
}

Group create_process_group(const c10::intrusive_ptr<c10d::Store>& store, int rank, int world_size,
                           const std::string& bind_host, int cuda_index,
                           const InitOptions& options) {
  bool want_nccl = options.backend == Backend::nccl;
#ifdef DLRUN_WITH_NCCL
  if (options.backend == Backend::automatic) want_nccl = cuda_index >= 0;
  if (want_nccl) {
    if (cuda_index < 0) {
      throw ConfigError(fmt::format(
          "rank {}: the NCCL backend was asked for, but this rank trains on the CPU: start GPU "
          "ranks (dlrun local --gpus N) or use Backend::gloo",
          rank));
    }
    auto nccl_options = c10d::ProcessGroupNCCL::Options::create();
    nccl_options->timeout = options.collective_timeout;
    auto prefixed = c10::make_intrusive<c10d::PrefixStore>("nccl", store);
    auto nccl = c10::make_intrusive<c10d::ProcessGroupNCCL>(prefixed, rank, world_size, nccl_options);
    return {as_group(prefixed, rank, world_size, nccl, /*nccl=*/true, cuda_index), "nccl"};
  }
#else
  if (want_nccl) {
    throw ConfigError(
        "the NCCL backend was asked for, but this dlrun runtime was built without CUDA/NCCL: "
        "rebuild against a CUDA LibTorch with NCCL installed, or use Backend::gloo");
  }
#endif
  auto gloo_options = c10d::ProcessGroupGloo::Options::create(options.collective_timeout);
  gloo_options->devices.push_back(gloo_device(bind_host));
  gloo_options->threads = 2;
  auto prefixed = c10::make_intrusive<c10d::PrefixStore>("gloo", store);
  try {
    auto gloo = c10::make_intrusive<c10d::ProcessGroupGloo>(prefixed, rank, world_size, gloo_options);
    return {as_group(prefixed, rank, world_size, gloo, /*nccl=*/false, cuda_index), "gloo"};
  } catch (const std::exception& e) {
    throw RendezvousTimeout(fmt::format("rank {}: could not connect Gloo to the other {} ranks: {}",
                                        rank, world_size - 1, runtime::message_of(e)));
  }
}

}  // namespace dlrun::runtime
