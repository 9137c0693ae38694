// dlrun._dlrun: the runtime's C++ objects for Python (the `dlrun` package wraps them in
// runtime/python/dlrun/). Tensors cross as they are (torch's own type caster: no copies), so
// DataParallel reduces the gradients of a Python model's parameters in place. The runtime's
// exceptions become dlrun.Error and its subclasses, with the runtime's messages.
//
// The calls that wait for other ranks (init, barrier, the small collectives, prepare_backward,
// synchronize) release the GIL while they wait. Checkpoint.save()/restore() and
// AdaptiveBatch.step() keep it: they call back into Python (the tracked objects, the
// optimizer), and a Python error raised there travels through them.

#include <pybind11/functional.h>
#include <pybind11/stl.h>
#include <pybind11/stl/filesystem.h>
#include <torch/csrc/utils/pybind.h>

#include <chrono>
#include <cmath>
#include <cstdio>
#include <initializer_list>
#include <memory>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "dlrun/adaptive_batch.hpp"
#include "dlrun/checkpoint.hpp"
#include "dlrun/context.hpp"
#include "dlrun/data_parallel.hpp"
#include "dlrun/elastic_sampler.hpp"
#include "dlrun/optimizer_adapter.hpp"
#include "dlrun/runtime_errors.hpp"

namespace py = pybind11;

namespace {

std::chrono::milliseconds milliseconds(const char* name, double seconds) {
  // From a millisecond to 30 days: beyond, Gloo's and the store's clocks overflow (1e10 s failed
  // at once, "within -9.2e+15 s"), and below, it rounded to 0 ms.
  if (!(seconds >= 0.001 && seconds <= 30 * 86400.0)) {
    char text[64];
    std::snprintf(text, sizeof text, "%g", seconds);
    throw dlrun::ConfigError(std::string(name) + " must be from 0.001 to 2592000 seconds (30 days), not " + text);
  }
  return std::chrono::milliseconds(static_cast<int64_t>(std::llround(seconds * 1000)));
}

// The value of `choices` named `text`; ConfigError naming them all otherwise.
template <typename T>
T choose(const char* what, const std::string& text,
         std::initializer_list<std::pair<const char*, T>> choices) {
  std::string names;
  for (const auto& [name, value] : choices) {
    if (text == name) return value;
    names += std::string(names.empty() ? "" : ", ") + "\"" + name + "\"";
  }
  throw dlrun::ConfigError(std::string(what) + " must be one of " + names + ", not \"" + text +
                           "\"");
}

dlrun::Context init(double rendezvous_timeout, double collective_timeout,
                    const std::string& backend, const std::string& device, bool handle_signals,
                    bool shared_memory_allreduce) {
  dlrun::InitOptions options;
  options.rendezvous_timeout = milliseconds("rendezvous_timeout", rendezvous_timeout);
  options.collective_timeout = milliseconds("collective_timeout", collective_timeout);
  options.backend = choose<dlrun::Backend>("backend", backend,
                                           {{"auto", dlrun::Backend::automatic},
                                            {"gloo", dlrun::Backend::gloo},
                                            {"nccl", dlrun::Backend::nccl}});
  options.device = choose<dlrun::DeviceKind>("device", device,
                                             {{"auto", dlrun::DeviceKind::automatic},
                                              {"cpu", dlrun::DeviceKind::cpu},
                                              {"cuda", dlrun::DeviceKind::cuda}});
  options.handle_signals = handle_signals;
  options.shared_memory_allreduce = shared_memory_allreduce;
  return dlrun::init(options);
}

// A Python object a Checkpoint carries: its checkpoint_state() -> bytes is written as the
// checkpoint's state-NAME.txt, restore_checkpoint_state(bytes) gets it back.
class PythonState : public dlrun::Checkpointable {
 public:
  explicit PythonState(py::object object) : m_object(std::move(object)) {}
  std::string checkpoint_state() const override {
    py::gil_scoped_acquire gil;
    return m_object.attr("checkpoint_state")().cast<std::string>();
  }
  void restore_checkpoint_state(const std::string& text) override {
    py::gil_scoped_acquire gil;
    m_object.attr("restore_checkpoint_state")(py::bytes(text));
  }
  void check_checkpoint_state(const std::string& text) const override {
    py::gil_scoped_acquire gil;
    if (py::hasattr(m_object, "check_checkpoint_state")) m_object.attr("check_checkpoint_state")(py::bytes(text));
  }

 private:
  py::object m_object;
};

// A torch.optim optimizer for AdaptiveBatch. `step` is the optimizer's own step (the dlrun
// package replaces the optimizer's with one that goes through AdaptiveBatch).
class PythonOptimizer : public dlrun::OptimizerAdapter {
 public:
  PythonOptimizer(py::object optimizer, py::object step, dlrun::OptimizerKind kind)
      : m_optimizer(std::move(optimizer)), m_step(std::move(step)), m_kind(kind) {}
  dlrun::OptimizerKind kind() const override { return m_kind; }
  std::vector<std::vector<at::Tensor>> parameter_groups() const override {
    py::gil_scoped_acquire gil;
    std::vector<std::vector<at::Tensor>> out;
    for (const auto& group : groups())
      out.push_back(group["params"].cast<std::vector<at::Tensor>>());
    return out;
  }
  std::vector<double> learning_rates() const override {
    py::gil_scoped_acquire gil;
    std::vector<double> out;
    for (const auto& group : groups()) out.push_back(group["lr"].cast<double>());
    return out;
  }
  void set_learning_rates(const std::vector<double>& rates) override {
    py::gil_scoped_acquire gil;
    size_t g = 0;
    for (auto group : groups()) {
      if (g < rates.size()) group["lr"] = rates[g++];
    }
  }
  void step() override {
    py::gil_scoped_acquire gil;
    m_step();
  }
  std::vector<dlrun::AdamMoments> adam_moments() const override {
    if (m_kind != dlrun::OptimizerKind::adam) return {};
    py::gil_scoped_acquire gil;
    std::vector<dlrun::AdamMoments> out;
    py::object state = m_optimizer.attr("state");
    for (const auto& group : groups()) {
      const double beta2 = py::tuple(group["betas"])[1].cast<double>();
      const double eps = group["eps"].cast<double>();
      for (auto p : group["params"]) {
        py::object s = state.attr("get")(p);
        if (s.is_none() || !s.contains("exp_avg_sq")) continue;
        py::object step = s["step"];  // a tensor in torch 1.12+, a number before
        const auto steps = py::float_(step).cast<double>();
        out.push_back({p.cast<at::Tensor>(), s["exp_avg_sq"].cast<at::Tensor>(),
                       static_cast<int64_t>(steps), beta2, eps});
      }
    }
    return out;
  }
  double momentum_gain() const override {
    // torch.optim.SGD's heavy-ball momentum (its first group's); an optimizer without both
    // keys has none.
    if (m_kind != dlrun::OptimizerKind::sgd_like) return 1.0;
    py::gil_scoped_acquire gil;
    const std::vector<py::dict> all = groups();
    if (all.empty() || !all[0].contains("momentum") || !all[0].contains("dampening")) return 1.0;
    const auto momentum = all[0]["momentum"].cast<double>();
    const auto dampening = all[0]["dampening"].cast<double>();
    if (!(momentum > 0 && momentum < 1)) return 1.0;
    return (1 - dampening) / (1 - momentum);
  }

 private:
  std::vector<py::dict> groups() const {
    std::vector<py::dict> out;
    for (auto group : m_optimizer.attr("param_groups")) out.push_back(group.cast<py::dict>());
    return out;
  }
  py::object m_optimizer;
  py::object m_step;
  dlrun::OptimizerKind m_kind;
};

// dlrun::Checkpoint plus the Python objects it tracks, kept alive as long as it is.
class PythonCheckpoint {
 public:
  PythonCheckpoint(dlrun::Context context, const std::string& dir, int keep_last)
      : m_checkpoint(std::move(context), dir, options(keep_last)) {}
  void track_object(const std::string& name, py::object object) {
    m_states.push_back(std::make_unique<PythonState>(std::move(object)));
    m_checkpoint.track(name, *m_states.back());
  }
  // AdaptiveBatch: its C++ state, as the C++ runtime's own checkpoints carry it.
  void track_adaptive(const std::string& name, py::object adaptive) {
    m_checkpoint.track(name, adaptive.cast<dlrun::AdaptiveBatch&>());
    m_samplers.push_back(std::move(adaptive));
  }
  void track_sampler(py::object sampler) {
    m_checkpoint.track(sampler.cast<dlrun::ElasticSampler&>());
    m_samplers.push_back(std::move(sampler));
  }
  dlrun::Checkpoint& get() { return m_checkpoint; }

 private:
  static dlrun::CheckpointOptions options(int keep_last) {
    if (keep_last < 1) throw dlrun::ConfigError("keep_last must be at least 1");
    dlrun::CheckpointOptions out;
    out.keep_last = keep_last;
    return out;
  }
  dlrun::Checkpoint m_checkpoint;
  std::vector<std::unique_ptr<PythonState>> m_states;
  std::vector<py::object> m_samplers;
};

// `with dp.no_sync():` for Python: the C++ guard lives between __enter__ and __exit__.
class NoSync {
 public:
  explicit NoSync(dlrun::DataParallel& owner) : m_owner(owner) {}
  void enter() { m_guard = std::make_unique<dlrun::DataParallel::NoSyncGuard>(m_owner); }
  void exit() { m_guard.reset(); }

 private:
  dlrun::DataParallel& m_owner;
  std::unique_ptr<dlrun::DataParallel::NoSyncGuard> m_guard;
};

void bind_errors(py::module_& m) {
  // Base first: pybind11 tries the translators registered last first, so a subclass is
  // caught as itself.
  auto error = py::register_exception<dlrun::Error>(m, "Error", PyExc_RuntimeError);
  auto config = py::register_exception<dlrun::ConfigError>(m, "ConfigError", error.ptr());
  py::register_exception<dlrun::EnvironmentError>(m, "EnvironmentError", config.ptr());
  py::register_exception<dlrun::RendezvousTimeout>(m, "RendezvousTimeout", error.ptr());
  py::register_exception<dlrun::CommunicationError>(m, "CommunicationError", error.ptr());
  py::register_exception<dlrun::CheckpointError>(m, "CheckpointError", error.ptr());
}

void bind_context(py::module_& m) {
  py::class_<dlrun::Context>(m, "Context",
                             "This process's place in the training world (C++ dlrun::Context).")
      .def_property_readonly("rank", &dlrun::Context::rank)
      .def_property_readonly("world_size", &dlrun::Context::world_size)
      .def_property_readonly("local_rank", &dlrun::Context::local_rank)
      .def_property_readonly("nodes", &dlrun::Context::nodes)
      .def_property_readonly("restart_count", &dlrun::Context::restart_count)
      .def_property_readonly("run_dir", &dlrun::Context::run_dir)
      .def_property_readonly("checkpoint_dir", &dlrun::Context::checkpoint_dir)
      .def_property_readonly("backend", &dlrun::Context::backend_name)
      .def_property_readonly("device", [](const dlrun::Context& c) { return c.device().str(); })
      .def("stop_requested", &dlrun::Context::stop_requested)
      .def("exit_code", &dlrun::Context::exit_code)
      .def("request_stop", &dlrun::Context::request_stop)
      .def("stop_pending", &dlrun::Context::stop_pending)
      .def("poll_stop", &dlrun::Context::poll_stop, py::call_guard<py::gil_scoped_release>())
      .def("barrier", &dlrun::Context::barrier, py::call_guard<py::gil_scoped_release>())
      .def(
          "all_reduce_sum",
          [](dlrun::Context& c, std::vector<double> values) {
            c.all_reduce_sum(values);
            return values;
          },
          py::call_guard<py::gil_scoped_release>())
      .def("broadcast", &dlrun::Context::broadcast, py::call_guard<py::gil_scoped_release>());
  m.def("init", &init, py::arg("rendezvous_timeout") = 60.0, py::arg("collective_timeout") = 600.0,
        py::arg("backend") = "auto", py::arg("device") = "auto", py::arg("handle_signals") = true,
        py::arg("shared_memory_allreduce") = true, py::call_guard<py::gil_scoped_release>());
}

void bind_data_parallel(py::module_& m) {
  py::class_<NoSync>(m, "NoSync")
      .def("__enter__", &NoSync::enter)
      .def("__exit__", [](NoSync& s, py::args) { s.exit(); });
  py::class_<dlrun::DataParallel>(m, "DataParallel")
      .def(py::init([](const std::vector<at::Tensor>& parameters,
                       const std::vector<at::Tensor>& buffers, dlrun::Context context,
                       double bucket_cap_mb, double first_bucket_cap_mb) {
             dlrun::DataParallelOptions options;
             options.bucket_cap_bytes = static_cast<int64_t>(bucket_cap_mb * 1024 * 1024);
             options.first_bucket_cap_bytes =
                 static_cast<int64_t>(first_bucket_cap_mb * 1024 * 1024);
             if (options.bucket_cap_bytes <= 0 || options.first_bucket_cap_bytes <= 0) {
               throw dlrun::ConfigError("bucket sizes must be positive");
             }
             return std::make_unique<dlrun::DataParallel>(parameters, buffers, std::move(context),
                                                          options);
           }),
           py::arg("parameters"), py::arg("buffers"), py::arg("context"),
           py::arg("bucket_cap_mb") = 25.0, py::arg("first_bucket_cap_mb") = 1.0)
      .def("prepare_backward", &dlrun::DataParallel::prepare_backward,
           py::call_guard<py::gil_scoped_release>())
      .def("synchronize", &dlrun::DataParallel::synchronize,
           py::call_guard<py::gil_scoped_release>())
      .def("finish_step", &dlrun::DataParallel::finish_step)
      .def("bucket_count", &dlrun::DataParallel::bucket_count)
      .def(
          "no_sync", [](dlrun::DataParallel& dp) { return std::make_unique<NoSync>(dp); },
          py::keep_alive<0, 1>());
}

void bind_sampler(py::module_& m) {
  py::class_<dlrun::SampleBatch>(m, "SampleBatch")
      .def_readonly("indices", &dlrun::SampleBatch::indices)
      .def_readonly("global_size", &dlrun::SampleBatch::global_size)
      .def_readonly("epoch", &dlrun::SampleBatch::epoch)
      .def_readonly("first_position", &dlrun::SampleBatch::first_position)
      .def("loss_scale", &dlrun::SampleBatch::loss_scale);
  py::class_<dlrun::ElasticSampler>(m, "ElasticSampler")
      .def(py::init<int64_t, const dlrun::Context&, uint64_t>(), py::arg("dataset_size"),
           py::arg("context"), py::arg("seed"))
      .def(py::init<int64_t, int, int, uint64_t>(), py::arg("dataset_size"), py::arg("rank"),
           py::arg("world_size"), py::arg("seed"))
      .def("next", &dlrun::ElasticSampler::next, py::arg("global_batch_size"))
      .def("next_epoch", &dlrun::ElasticSampler::next_epoch)
      .def_property_readonly("epoch", &dlrun::ElasticSampler::epoch)
      .def_property_readonly("position", &dlrun::ElasticSampler::position)
      .def_property_readonly("dataset_size", &dlrun::ElasticSampler::dataset_size)
      .def("epoch_done", &dlrun::ElasticSampler::epoch_done)
      .def(
          "rewind_to",
          [](dlrun::ElasticSampler& sampler, int64_t position) {
            dlrun::SamplerState state = sampler.state();
            state.position = position;
            sampler.restore(state);
          },
          py::arg("position"), "Back to `position` of this epoch (a step left before it was applied)")
      .def_static("permutation", &dlrun::ElasticSampler::permutation);
}

void bind_checkpoint(py::module_& m) {
  py::class_<dlrun::CheckpointInfo>(m, "CheckpointInfo")
      .def_readonly("path", &dlrun::CheckpointInfo::path)
      .def_readonly("step", &dlrun::CheckpointInfo::step)
      .def_readonly("saved_world_size", &dlrun::CheckpointInfo::saved_world_size)
      .def_readonly("saved_restart_count", &dlrun::CheckpointInfo::saved_restart_count)
      .def_readonly("values", &dlrun::CheckpointInfo::values);
  py::class_<PythonCheckpoint>(m, "Checkpoint")
      .def(py::init<dlrun::Context, const std::string&, int>(), py::arg("context"), py::arg("dir"),
           py::arg("keep_last") = 3)
      .def("track_object", &PythonCheckpoint::track_object)
      .def("track_sampler", &PythonCheckpoint::track_sampler)
      .def("track_adaptive", &PythonCheckpoint::track_adaptive)
      .def("save",
           [](PythonCheckpoint& c, int64_t step, const std::map<std::string, double>& values) {
             return c.get().save(step, values);
           })
      .def("restore", [](PythonCheckpoint& c) { return c.get().restore(); });
}

dlrun::OptimizerKind optimizer_kind(const std::string& kind) {
  if (kind == "adam") return dlrun::OptimizerKind::adam;
  if (kind == "adaptive") return dlrun::OptimizerKind::adaptive;
  if (kind == "sgd") return dlrun::OptimizerKind::sgd_like;
  throw dlrun::ConfigError("optimizer kind must be \"adam\", \"adaptive\" or \"sgd\", not \"" +
                           kind + "\"");
}

void bind_adaptive(py::module_& m) {
  py::class_<dlrun::AdaptiveBatch>(m, "AdaptiveBatch")
      .def(py::init([](dlrun::Context context, dlrun::DataParallel& dp, py::object optimizer,
                       py::object step, const std::string& kind, int64_t initial_batch,
                       int64_t max_batch, int64_t min_micro_batch, int64_t max_micro_batch,
                       bool accumulation, const std::string& rule, int64_t replan_every,
                       int64_t measure_every, double min_improvement, bool noise_floor,
                       int64_t log_every, const std::string& metrics_path,
                       std::function<double()> clock) {
             dlrun::AdaptiveBatchOptions o;
             o.initial_batch = initial_batch;
             o.max_batch = max_batch;
             o.min_micro_batch = min_micro_batch;
             o.max_micro_batch = max_micro_batch;
             o.accumulation = accumulation;
             auto parsed = dlrun::parse_scaling_rule(rule);
             if (!parsed) {
               throw dlrun::ConfigError(
                   "scaling_rule must be auto, adascale, linear, sqrt, adam or none, not \"" +
                   rule + "\"");
             }
             o.rule = *parsed;
             o.replan_every = replan_every;
             o.measure_every = measure_every;
             o.min_improvement = min_improvement;
             o.noise_floor = noise_floor;
             o.log_every = log_every;
             o.metrics_path = metrics_path;
             o.clock = std::move(clock);
             auto adapter = std::make_shared<PythonOptimizer>(std::move(optimizer), std::move(step),
                                                              optimizer_kind(kind));
             return std::make_unique<dlrun::AdaptiveBatch>(std::move(context), dp, adapter, o);
           }),
           py::keep_alive<1, 3>())
      .def("shape",
           [](const dlrun::AdaptiveBatch& a) {
             const auto s = a.shape();
             return py::make_tuple(s.global_batch, s.micro_batch, s.accum_steps);
           })
      .def("split", &dlrun::AdaptiveBatch::split)
      .def("accumulated", &dlrun::AdaptiveBatch::accumulated)
      .def("observe_loss", &dlrun::AdaptiveBatch::observe_loss)
      .def("step", &dlrun::AdaptiveBatch::step, py::arg("samples") = -1)
      .def("progress", &dlrun::AdaptiveBatch::progress)
      .def("set_base_lr", &dlrun::AdaptiveBatch::set_base_lr)
      .def("base_lrs", &dlrun::AdaptiveBatch::base_lrs)
      .def("set_base_lrs", &dlrun::AdaptiveBatch::set_base_lrs)
      .def("stats", [](const dlrun::AdaptiveBatch& a) {
        const auto& s = a.stats();
        py::dict d;
        d["step"] = s.step;
        d["progress"] = s.progress;
        d["gain"] = s.gain;
        d["lr_factor"] = s.lr_factor;
        d["noise_scale"] = s.noise_scale;
        d["grad_sqr"] = s.grad_sqr;
        d["grad_var"] = s.grad_var;
        d["efficiency"] = s.efficiency;
        d["samples_per_sec"] = s.samples_per_sec;
        d["goodput"] = s.goodput;
        d["measure_every"] = s.measure_every;
        d["loss"] = s.loss;
        d["noise_floor"] = s.noise_floor;
        return d;
      });
}

}  // namespace

PYBIND11_MODULE(_dlrun, m) {
  m.doc() = "dlrun's C++ runtime (internal: use the dlrun package)";
  bind_errors(m);
  bind_context(m);
  bind_data_parallel(m);
  bind_sampler(m);
  bind_checkpoint(m);
  bind_adaptive(m);
}
