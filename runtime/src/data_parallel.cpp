#include "dlrun/data_parallel.hpp"

#include <fmt/format.h>
#include <fmt/ranges.h>
#include <torch/nn/module.h>
#include <torch/optim/optimizer.h>
#include <torch/version.h>

#include <algorithm>
#include <string_view>
#include <torch/csrc/distributed/c10d/ProcessGroup.hpp>
#include <torch/csrc/distributed/c10d/comm.hpp>
#include <torch/csrc/distributed/c10d/reducer.hpp>

#include "bucket_hook.hpp"
#include "context_state.hpp"
#include "error_text.hpp"
#include "dlrun/log.hpp"
#include "dlrun/runtime_errors.hpp"

namespace dlrun {
namespace {

// As PyTorch DDP: parameters and buffers go from rank 0 in messages of at most this size.
constexpr size_t k_broadcast_bytes = 250 * 1024 * 1024;

std::vector<at::Tensor> trainable(const std::vector<at::Tensor>& parameters) {
  std::vector<at::Tensor> out;
  for (const auto& p : parameters) {
    if (p.requires_grad()) out.push_back(p);
  }
  return out;
}

void broadcast_from_rank0(runtime::ContextState& state, const std::vector<at::Tensor>& parameters,
                          const std::vector<at::Tensor>& buffers) {
  std::vector<at::Tensor> tensors;
  // detach(): the same storage, written without autograd complaining about leaves.
  for (const auto& p : parameters) tensors.push_back(p.detach());
  for (const auto& b : buffers) tensors.push_back(b.detach());
  if (tensors.empty()) return;
  try {
    c10d::verify_params_across_processes(state.group, trainable(parameters), c10::nullopt);
    c10d::broadcast_coalesced(state.group, tensors, k_broadcast_bytes, 0);
  } catch (const std::exception& e) {
    // NCCL refuses two ranks of one communicator on one GPU.
    const bool shared_gpu =
        std::string_view(e.what()).find("Duplicate GPU") != std::string_view::npos;
    throw CommunicationError(fmt::format(
        "rank {}: could not take the initial weights from rank 0: {} ({})", state.rank, runtime::message_of(e),
        shared_gpu ? "NCCL needs a GPU of its own for every rank: start them with dlrun local "
                     "--gpus N, at most one rank per GPU"
                   : "every rank must build the same model"));
  }
}

// Whether every rank built the same model: the count, shapes and dtypes of its parameters and
// buffers, folded into a few small whole numbers each rank sums with the others (with their
// squares: all equal exactly when W·Σx² = (Σx)²). A rank whose model differs in dtype made the
// initial broadcast wait for the collective timeout (10 min), or crash in Gloo.
void check_same_model(Context& context, const std::vector<at::Tensor>& parameters,
                      const std::vector<at::Tensor>& buffers) {
  constexpr int64_t k_mod = 99991;  // keeps the squares' sums exact in a double
  int64_t count = static_cast<int64_t>(parameters.size() % 997) * 100 + static_cast<int64_t>(buffers.size() % 97);
  int64_t dtypes = 0, shapes = 0, frozen = 0;
  int64_t i = 0;
  std::vector<std::string> kinds;
  auto fold = [&](const at::Tensor& t) {
    ++i;
    const auto type = static_cast<int64_t>(t.scalar_type()) + 1;
    dtypes = (dtypes + i * type) % k_mod;
    int64_t shape = t.dim() + 1;
    for (int64_t d : t.sizes()) shape = (shape * 31 + d) % k_mod;
    shapes = (shapes + i % 1000 * shape) % k_mod;
    const std::string kind(c10::toString(t.scalar_type()));
    if (std::find(kinds.begin(), kinds.end(), kind) == kinds.end()) kinds.push_back(kind);
  };
  for (const auto& p : parameters) {
    fold(p);
    if (!p.requires_grad()) frozen = (frozen + i) % k_mod;
  }
  for (const auto& b : buffers) fold(b);
  std::vector<double> values;
  for (int64_t x : {count, dtypes, shapes, frozen}) {
    values.push_back(static_cast<double>(x));
    values.push_back(static_cast<double>(x) * static_cast<double>(x));
  }
  context.all_reduce_sum(values);
  const double world = context.world_size();
  const char* what[] = {"how many parameters and buffers it has", "their dtypes", "their shapes",
                        "which parameters are frozen (requires_grad false)"};
  std::vector<std::string> differ;
  for (size_t k = 0; k < 4; ++k) {
    if (world * values[2 * k + 1] != values[2 * k] * values[2 * k]) differ.push_back(what[k]);
  }
  if (differ.empty()) return;
  int64_t numel = 0;
  for (const auto& p : parameters) numel += p.numel();
  throw ConfigError(fmt::format(
      "DataParallel: the ranks built different models ({} differ): every rank must build the same model, with the "
      "same dtypes, before making the DataParallel; rank {} has {} parameters ({} values) and {} buffers, of "
      "dtype {}",
      fmt::join(differ, ", "), context.rank(), parameters.size(), numel, buffers.size(), fmt::join(kinds, ", ")));
}

}  // namespace

struct DataParallel::Impl {
  Context context{nullptr};
  std::shared_ptr<torch::nn::Module> module;
  std::shared_ptr<runtime::StepVote> vote = std::make_shared<runtime::StepVote>();
  std::vector<double> local_sqr;  // of the last synchronize()
  std::unique_ptr<c10d::Reducer> reducer;
  size_t bucket_count = 0;
  bool sync = true;
  bool stop_voted = false;  // of the last synchronize()
  // The last backward() ran inside no_sync(): its gradients (and what it accumulated onto) are
  // this rank's own until a synced backward() reduces them.
  bool unreduced = false;
  // A synced backward was prepared (prepare_backward) since the last step.
  bool prepared = false;
  // Every parameter, and whether it was trainable when the DataParallel was made: the set the
  // gradient buckets hold. One unfrozen later trained on each rank alone.
  std::vector<at::Tensor> parameters;
  std::vector<bool> trainable;
  std::vector<std::string> names;  // from the module, when given one
};

DataParallel::DataParallel(std::shared_ptr<torch::nn::Module> module, Context context,
                           DataParallelOptions options)
    : DataParallel(module->parameters(/*recurse=*/true), module->buffers(/*recurse=*/true),
                   std::move(context), options) {
  for (const auto& item : module->named_parameters(/*recurse=*/true)) m_impl->names.push_back(item.key());
  m_impl->module = std::move(module);
}

DataParallel::DataParallel(const std::vector<at::Tensor>& parameters,
                           const std::vector<at::Tensor>& buffers, Context context,
                           DataParallelOptions options)
    : m_impl(std::make_unique<Impl>()) {
  m_impl->context = std::move(context);
  auto& state = m_impl->context.state();
  // Before anything is exchanged (LibTorch's check of the ranks' parameters crashed on none),
  // and in a world of one too, as PyTorch DDP.
  std::vector<at::Tensor> params = trainable(parameters);
  if (params.empty()) {
    throw ConfigError("DataParallel: the module has no parameters that require gradients");
  }
  m_impl->parameters = parameters;
  for (const auto& p : parameters) m_impl->trainable.push_back(p.requires_grad());
  if (!state.group) return;  // a world of one: gradients are already final
  check_same_model(m_impl->context, parameters, buffers);
  broadcast_from_rank0(state, parameters, buffers);
  std::vector<size_t> caps{static_cast<size_t>(options.first_bucket_cap_bytes),
                           static_cast<size_t>(options.bucket_cap_bytes)};
  std::vector<bool> sparse(params.size(), false);
  auto [buckets, limits] = c10d::compute_bucket_assignment_by_size(params, caps, sparse);
  // Parameters registered last get their gradients first: their bucket goes first.
  std::reverse(buckets.begin(), buckets.end());
  std::reverse(limits.begin(), limits.end());
  m_impl->bucket_count = buckets.size();
  // The Reducer's constructor changed with LibTorch 2: the per-bucket limits went, flags came.
#if TORCH_VERSION_MAJOR < 2
  m_impl->reducer = std::make_unique<c10d::Reducer>(
      params, std::move(buckets), std::move(limits), state.group, sparse, options.bucket_cap_bytes,
      /*find_unused_parameters=*/false,
      /*gradient_as_bucket_view=*/false, std::unordered_map<size_t, std::string>{},
      options.first_bucket_cap_bytes);
#else
  (void)limits;
  m_impl->reducer = std::make_unique<c10d::Reducer>(
      params, std::move(buckets), state.group, sparse, options.bucket_cap_bytes,
      /*find_unused_parameters=*/false,
      /*gradient_as_bucket_view=*/false, std::unordered_map<size_t, std::string>{},
      options.first_bucket_cap_bytes, /*skip_all_reduce_unused_params=*/false,
      /*use_python_reducer=*/false, /*bucket_bytes_cap_list=*/std::vector<int64_t>{});
#endif
  m_impl->reducer->register_comm_hook(
      std::make_unique<runtime::BucketHook>(state.group, state, m_impl->vote));
  log::debug("rank {}: {} parameters in {} gradient buckets", state.rank, params.size(),
             m_impl->bucket_count);
}

DataParallel::~DataParallel() = default;

void DataParallel::backward(const at::Tensor& loss) {
  prepare_backward();
  loss.backward();
}

void DataParallel::prepare_backward() {
  // (In a world of one there is nothing to average: a change is harmless.)
  for (size_t i = 0; m_impl->reducer && i < m_impl->parameters.size(); ++i) {
    if (m_impl->parameters[i].requires_grad() == m_impl->trainable[i]) continue;
    const std::string name = i < m_impl->names.size() ? fmt::format("'{}'", m_impl->names[i]) : fmt::format("{}", i);
    throw ConfigError(fmt::format(
        "DataParallel: parameter {} was {} after the DataParallel was made; the set of parameters it averages is "
        "fixed then, and {}: make a new DataParallel (and optimizer) after changing requires_grad, as with "
        "PyTorch DDP",
        name, m_impl->trainable[i] ? "frozen" : "unfrozen",
        m_impl->trainable[i] ? "a frozen one would get no gradient" : "an unfrozen one would train on each rank alone "
                                                                     "(the replicas drift apart)"));
  }
  if (m_impl->reducer) m_impl->unreduced = !m_impl->sync;
  if (m_impl->reducer && m_impl->sync) {
    m_impl->prepared = true;
    try {
      // Collective on the first synced step after the first one: all ranks get here together.
      m_impl->reducer->rebuild_buckets();
      m_impl->reducer->prepare_for_backward({});
    } catch (const c10::Error& e) {
      // LibTorch's words name Python's DistributedDataParallel(find_unused_parameters=True),
      // which this API does not have.
      if (std::string_view(e.what_without_backtrace()).find("finished reduction in the prior iteration") ==
          std::string_view::npos)
        throw;
      // Name them where it can be told (a gradient never made): the user has to find them.
      std::vector<std::string> none;
      for (size_t i = 0; i < m_impl->parameters.size() && none.size() < 5; ++i) {
        if (!m_impl->trainable[i] || m_impl->parameters[i].grad().defined()) continue;
        none.push_back(i < m_impl->names.size() ? "'" + m_impl->names[i] + "'" : "number " + std::to_string(i));
      }
      throw ConfigError(fmt::format(
          "DataParallel: a parameter that requires a gradient got none in the last step (not used in the loss{}): "
          "every trainable parameter must take part in every step; freeze one that does not "
          "(C++ requires_grad(false), Python requires_grad_(False)) before making the DataParallel",
          none.empty() ? "" : fmt::format(": {}", fmt::join(none, ", "))));
    }
  }
}

void DataParallel::synchronize() {
  auto& state = m_impl->context.state();
  auto& vote = *m_impl->vote;
  if (!vote.pending) return;
  vote.pending = false;
  try {
    if (auto work = std::move(vote.work)) work->wait();
    if (auto done = std::move(vote.shm_done)) {
      done->wait();
      if (done->hasError()) throw CommunicationError(done->tryRetrieveErrorMessage());
    }
  } catch (const std::exception& e) {
    throw CommunicationError(fmt::format("rank {}: the gradient allreduce or stop vote failed: {} ({})", state.rank,
                                         runtime::message_of(e), runtime::peers_hint(runtime::message_of(e))));
  }
  // One copy to the host per step, which the stop flag needs anyway.
  const at::Tensor values = m_impl->vote->values.to(at::kCPU, at::kDouble);
  const double* v = values.data_ptr<double>();
  const double* end = v + values.numel();
  bool norms = true;
  if (vote.carries_check) {
    vote.carries_check = false;
    end -= runtime::k_sampler_slots;
    norms = vote.check_has_norms;
    if (auto disagreement = runtime::sampler_disagreement(end, vote.checked_take, state.rank)) {
      throw ConfigError(*disagreement);
    }
  }
  m_impl->stop_voted = v[0] > 0;
  if (norms) {
    m_impl->local_sqr.assign(v + 1, end);
  } else {
    m_impl->local_sqr.clear();  // zeros that held the groups' places
  }
  for (double& x : m_impl->local_sqr) x /= state.world_size;
}

void DataParallel::step(torch::optim::Optimizer& optimizer) {
  step([&optimizer] { optimizer.step(); });
}

void DataParallel::step(const std::function<void()>& optimizer_step) {
  if (m_impl->unreduced) {
    // Each rank would apply its own gradient: the replicas drift apart without a word.
    throw ConfigError(
        "DataParallel::step: the last backward() ran inside no_sync(), so this step's gradients were never "
        "averaged over the ranks and the replicas would drift apart: run the step's last backward() outside "
        "no_sync() (it reduces everything accumulated before it)");
  }
  if (m_impl->reducer && !m_impl->prepared) {
    // loss.backward() alone: the Reducer was not told, and nothing was averaged (nor voted on:
    // a stop request would never be seen).
    throw ConfigError(
        "DataParallel::step: no backward() went through this DataParallel since the last step, so the gradients "
        "were never averaged over the ranks and the replicas would drift apart: call dp.backward(loss), not "
        "loss.backward() (in Python: run the forward through the DataParallel, in training mode)");
  }
  synchronize();
  optimizer_step();
  // (Cleared here, not in finish_step(): Python's stop check and checkpoint finish a step
  // between the backward and this one.)
  m_impl->prepared = false;
  finish_step();
}

void DataParallel::finish_step() {
  auto& state = m_impl->context.state();
  bool stop = false;
  if (!state.group) {
    stop = state.local_stop_pending();
  } else {
    stop = m_impl->stop_voted;
    m_impl->stop_voted = false;
  }
  state.report_progress();
  if (stop && !state.agreed_stop) {
    state.agreed_stop = true;
    if (state.rank == 0) {
      if (state.world_size == 1) {
        log::info("stopping after this step");
      } else {
        log::info("all {} ranks agreed to stop after this step", state.world_size);
      }
    } else {
      log::debug("rank {}: all ranks agreed to stop after this step", state.rank);
    }
  }
}

DataParallel::NoSyncGuard::NoSyncGuard(DataParallel& owner)
    : m_owner(owner), m_previous(owner.m_impl->sync) {
  owner.m_impl->sync = false;
}
DataParallel::NoSyncGuard::~NoSyncGuard() {
  m_owner.m_impl->sync = m_previous;
}

void DataParallel::track_gradient_norms(
    const std::vector<std::vector<at::Tensor>>& groups,
    std::shared_ptr<const runtime::Preconditioner> preconditioner) {
  auto& vote = *m_impl->vote;
  vote.preconditioner = std::move(preconditioner);
  vote.group_of.clear();
  vote.local_sqr.clear();
  for (size_t g = 0; g < groups.size(); ++g) {
    for (const auto& p : groups[g]) vote.group_of[p.unsafeGetTensorImpl()] = g;
  }
  vote.groups = groups.size();
}

void DataParallel::measure_gradient_norms(bool on) {
  m_impl->vote->measure = on;
}

std::vector<double> DataParallel::local_gradient_sqr_norms() const {
  return m_impl->local_sqr;
}

size_t DataParallel::bucket_count() const {
  return m_impl->bucket_count;
}
const Context& DataParallel::context() const {
  return m_impl->context;
}

}  // namespace dlrun
