#include <ATen/ATen.h>
#include <fmt/format.h>

#include <fcntl.h>
#include <unistd.h>

#include <algorithm>
#include <cstdlib>
#include <optional>
#include <torch/csrc/distributed/c10d/ProcessGroup.hpp>
#include <torch/csrc/distributed/c10d/Store.hpp>

#include "context_state.hpp"
#include "dlrun/log.hpp"
#include "dlrun/protocol.hpp"
#include "dlrun/runtime_errors.hpp"
#include "error_text.hpp"
#include "process_group_factory.hpp"
#include "rank_device.hpp"
#include "serial_worker.hpp"
#include "shm_allreduce.hpp"
#include "shm_setup.hpp"
#include "stop_signal.hpp"
#include "world_env.hpp"

namespace dlrun {
namespace runtime {

namespace {

// For a world whose ranks all run on this host: CPU gradients meet in shared memory, on a
// worker thread, instead of going through Gloo's sockets (when wanted and set up on every rank).
void use_shared_memory_if_wanted(ContextState& state, const InitOptions& options) {
  if (state.backend != "gloo" || state.world_size < 2 ||
      !shm_allreduce_wanted(options.shared_memory_allreduce)) {
    return;
  }
  state.shm =
      setup_shm_allreduce(state.store, state.rank, state.world_size, options.rendezvous_timeout);
  if (!state.shm) return;
  state.shm->set_timeout(options.collective_timeout);
  state.shm_worker = std::make_shared<SerialWorker>();
}

}  // namespace

void ContextState::announce_stop_handling() {
  if (announced_stop_handling) return;
  announced_stop_handling = true;
  if (rank != 0 || run_dir.empty()) return;
  const std::string path = run_dir + "/" + run_files::k_handles_stop;
  int fd = ::open(path.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0600);
  if (fd >= 0) ::close(fd);  // its presence is the message; a failure only keeps the job unresized
}

bool ContextState::local_stop_pending() const {
  return local_stop.load(std::memory_order_relaxed) || (uses_signals && stop_signal::pending());
}

Context make_context(const c10::intrusive_ptr<c10d::Store>& store, int rank, int world_size,
                     const InitOptions& options) {
  auto state = std::make_shared<ContextState>();
  state->rank = rank;
  state->world_size = world_size;
  state->local_rank = rank;
  state->local_world_size = world_size;
  state->uses_signals = false;
  state->store = store;
  // Threads of one test process: the CPU, unless the test asks for a GPU or NCCL.
  DeviceKind device = options.device;
  if (device == DeviceKind::automatic)
    device = options.backend == Backend::nccl && nccl_compiled_in() ? DeviceKind::cuda
                                                                     : DeviceKind::cpu;
  state->cuda_index = select_rank_device(device, rank);
  Group group =
      create_process_group(store, rank, world_size, "127.0.0.1", state->cuda_index, options);
  state->group = group.group;
  state->backend = group.backend;
  use_shared_memory_if_wanted(*state, options);
  return Context(state);
}

}  // namespace runtime

namespace {

void wait_for(const c10::intrusive_ptr<c10d::Work>& work, const char* what, int rank) {
  try {
    work->wait();
  } catch (const std::exception& e) {
    throw CommunicationError(
        fmt::format("rank {}: {} failed: {} ({})", rank, what, runtime::message_of(e),
                    runtime::peers_hint(runtime::message_of(e))));
  }
}

// NCCL reduces device tensors only; Gloo, host tensors.
at::Device collective_device(const runtime::ContextState& state) {
  if (state.backend == "nccl")
    return at::Device(at::kCUDA, static_cast<c10::DeviceIndex>(state.cuda_index));
  return at::Device(at::kCPU);
}

}  // namespace

Context::Context(std::shared_ptr<runtime::ContextState> state) : m_state(std::move(state)) {}

int Context::rank() const {
  return m_state->rank;
}
int Context::world_size() const {
  return m_state->world_size;
}
int Context::local_rank() const {
  return m_state->local_rank;
}
int Context::nodes() const {
  const int per_node = std::max(1, m_state->local_world_size);
  return std::max(1, (m_state->world_size + per_node - 1) / per_node);
}
int Context::restart_count() const {
  return m_state->restart_count;
}
const std::string& Context::run_dir() const {
  return m_state->run_dir;
}

const std::string& Context::checkpoint_dir() const {
  return m_state->checkpoint_dir;
}
std::string Context::backend_name() const {
  return m_state->backend;
}
c10::Device Context::device() const {
  if (m_state->cuda_index < 0) return c10::Device(c10::DeviceType::CPU);
  return c10::Device(c10::DeviceType::CUDA, static_cast<c10::DeviceIndex>(m_state->cuda_index));
}
bool Context::stop_requested() const {
  runtime::stop_signal::mark_asked();
  m_state->announce_stop_handling();
  return m_state->agreed_stop;
}
int Context::exit_code() const {
  if (m_state->agreed_stop && !m_state->saved_after_stop && !m_state->said_unsaved_stop && is_main()) {
    // The restart goes back to the last checkpoint and trains its steps again: an AdaptDL
    // script, whose checkpoint was automatic, stopped so and repeated samples in silence.
    m_state->said_unsaved_stop = true;
    log::warn("the ranks stop to restart (exit {}) with no checkpoint saved since the stop was agreed: they go back "
              "to the last one saved and train the steps since it again; save one when stop_requested() is true, "
              "before exiting (docs/runtime.md)",
              exit_code::k_restart_me);
  }
  return m_state->agreed_stop ? exit_code::k_restart_me : exit_code::k_success;
}
void Context::request_stop() {
  m_state->local_stop.store(true, std::memory_order_relaxed);
}
bool Context::stop_pending() const {
  runtime::stop_signal::mark_asked();
  return m_state->local_stop_pending();
}
bool Context::poll_stop() {
  runtime::stop_signal::mark_asked();
  m_state->report_progress();
  if (!m_state->group) {
    if (m_state->local_stop_pending()) m_state->agreed_stop = true;
    return m_state->agreed_stop;
  }
  std::vector<double> flag{m_state->local_stop_pending() ? 1.0 : 0.0};
  all_reduce_sum(flag);
  if (flag[0] > 0) m_state->agreed_stop = true;
  return m_state->agreed_stop;
}

void Context::barrier() {
  if (!m_state->group) return;
  wait_for(m_state->group->barrier(), "barrier", rank());
}

void Context::all_reduce_sum(std::vector<double>& values) {
  if (!m_state->group || values.empty()) return;
  std::vector<at::Tensor> tensors{
      at::from_blob(values.data(), {static_cast<int64_t>(values.size())}, at::kDouble)
          .to(collective_device(*m_state), /*non_blocking=*/false, /*copy=*/true)};
  wait_for(m_state->group->allreduce(tensors), "allreduce", rank());
  at::Tensor result = tensors[0].cpu();
  std::copy_n(result.data_ptr<double>(), values.size(), values.begin());
}

int64_t Context::broadcast(int64_t value) {
  if (!m_state->group) return value;
  std::vector<at::Tensor> tensors{at::full(
      {1}, value, at::TensorOptions().dtype(at::kLong).device(collective_device(*m_state)))};
  wait_for(m_state->group->broadcast(tensors), "broadcast", rank());
  return tensors[0].item<int64_t>();
}

Context init(const InitOptions& options) {
  log::init_from_env();
  runtime::WorldEnv world =
      runtime::read_world_env([](const char* name) { return std::getenv(name); });
  auto state = std::make_shared<runtime::ContextState>();
  state->rank = world.rank;
  state->world_size = world.world_size;
  state->local_rank = world.local_rank;
  state->local_world_size = world.local_world_size;
  state->restart_count = world.restart_count;
  state->run_dir = world.run_dir;
  state->checkpoint_dir = !world.checkpoint_dir.empty() ? world.checkpoint_dir
                          : !world.run_dir.empty()      ? world.run_dir + "/checkpoints"
                                                        : std::string();
  state->progress_file = world.progress_file;
  state->uses_signals = options.handle_signals;
  state->cuda_index = runtime::select_rank_device(
      runtime::requested_device(options.device, world.device), world.local_rank);
  if (world.distributed() && world.world_size > 1) {
    // Until the ranks have met, a stop (dlrun stopping the group because another rank failed,
    // Ctrl-C) ends this rank at once: it has nothing to save, and no step would see the request.
    std::optional<runtime::stop_signal::DefaultActionScope> rendezvous;
    if (options.handle_signals) rendezvous.emplace();
    state->store = runtime::connect_store(world, options);
    auto group = runtime::create_process_group(state->store, world.rank, world.world_size,
                                               world.master_addr, state->cuda_index, options);
    state->group = group.group;
    state->backend = group.backend;
    if (world.local_world_size == world.world_size) {  // every rank on this host (dlrun local)
      runtime::use_shared_memory_if_wanted(*state, options);
    }
  }
  if (options.handle_signals) runtime::stop_signal::install();
  log::debug("rank {} of {} ready (backend {}{}, device {}, restart {})", state->rank,
             state->world_size, state->backend,
             state->shm ? ", gradients through shared memory" : "",
             state->cuda_index < 0 ? std::string("cpu") : fmt::format("cuda:{}", state->cuda_index),
             state->restart_count);
  return Context(state);
}

}  // namespace dlrun
