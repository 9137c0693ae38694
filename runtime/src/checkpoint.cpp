#include "dlrun/checkpoint.hpp"

#include <fmt/format.h>
#include <torch/nn/module.h>
#include <torch/optim/optimizer.h>
#include <torch/serialize/input-archive.h>
#include <torch/serialize/output-archive.h>
#include <torch/utils.h>
#include <unistd.h>

#include <algorithm>
#include <fstream>
#include <regex>
#include <sstream>

#include "checkpoint_manifest.hpp"
#include "remove_tree.hpp"
#include "dlrun/elastic_sampler.hpp"
#include "dlrun/log.hpp"
#include "dlrun/version.hpp"
#include "dlrun/runtime_errors.hpp"

namespace fs = std::filesystem;

namespace dlrun {
namespace {

constexpr const char* k_prefix = "step-";
constexpr const char* k_temp_prefix = ".tmp-step-";
constexpr const char* k_state_file = "state.txt";

std::string dir_name(int64_t step) {
  return fmt::format("{}{:012d}", k_prefix, step);
}

std::optional<int64_t> step_of(const fs::path& path) {
  const std::string name = path.filename().string();
  if (name.rfind(k_prefix, 0) != 0 || name.size() <= std::string(k_prefix).size())
    return std::nullopt;
  const std::string digits = name.substr(std::string(k_prefix).size());
  if (!std::all_of(digits.begin(), digits.end(), [](char c) { return c >= '0' && c <= '9'; })) {
    return std::nullopt;
  }
  return std::stoll(digits);
}

void check_name(const std::string& name) {
  static const std::regex valid("[A-Za-z0-9_-]+");
  if (!std::regex_match(name, valid)) {
    throw ConfigError(
        fmt::format("Checkpoint::track: '{}' is not a valid name (use letters, "
                    "digits, '_' and '-')",
                    name));
  }
}

// As torch::nn::Module::load, but copying into the existing tensors. Module::load replaces
// each parameter's data with set_(), after which autograd creates a new gradient accumulator
// for it, and the hooks DataParallel's reducer put on the old one never fire again:
// gradients would silently stop being reduced after a restore.
void load_in_place(torch::nn::Module& module, torch::serialize::InputArchive& archive) {
  torch::NoGradGuard no_grad;
  for (auto& param : module.named_parameters(/*recurse=*/false)) {
    at::Tensor loaded;
    archive.read(param.key(), loaded);
    param.value().copy_(loaded);
  }
  for (auto& buffer : module.named_buffers(/*recurse=*/false)) {
    at::Tensor loaded;
    archive.read(buffer.key(), loaded, /*is_buffer=*/true);
    buffer.value().copy_(loaded);
  }
  for (const auto& child : module.named_children()) {
    torch::serialize::InputArchive child_archive;
    archive.read(child.key(), child_archive);
    load_in_place(*child.value(), child_archive);
  }
}

// Where the optimizer's parameters live (its state must be there too); none if it has none.
c10::optional<c10::Device> parameter_device(const torch::optim::Optimizer& optimizer) {
  for (const auto& group : optimizer.param_groups()) {
    if (!group.params().empty()) return group.params().front().device();
  }
  return c10::nullopt;
}

using Values = std::map<std::string, std::string>;

Values read_state(const fs::path& path) {
  Values values;
  std::ifstream in(path);
  std::string key, value;
  while (in >> key && std::getline(in >> std::ws, value)) values[key] = value;
  return values;
}

}  // namespace

struct Checkpoint::Impl {
  Context context{nullptr};
  fs::path dir;
  CheckpointOptions options;
  std::vector<std::pair<std::string, std::shared_ptr<torch::nn::Module>>> modules;
  std::vector<std::pair<std::string, torch::optim::Optimizer*>> optimizers;
  ElasticSampler* sampler = nullptr;
  std::vector<std::pair<std::string, Checkpointable*>> objects;

  void write_files(const fs::path& tmp, int64_t step, const std::map<std::string, double>& values,
                   std::vector<std::string>& names) const;
  void prune() const;
  std::optional<int64_t> choose() const;
  CheckpointInfo load(const fs::path& path) const;
};

Checkpoint::Checkpoint(Context context, fs::path dir, CheckpointOptions options)
    : m_impl(std::make_unique<Impl>()) {
  m_impl->context = std::move(context);
  m_impl->dir = std::move(dir);
  m_impl->options = options;
  if (options.keep_last < 1) throw ConfigError("Checkpoint: keep_last must be at least 1");
}

Checkpoint::~Checkpoint() = default;

void Checkpoint::track(const std::string& name, std::shared_ptr<torch::nn::Module> module) {
  check_name(name);
  m_impl->modules.emplace_back(name, std::move(module));
}
void Checkpoint::track(const std::string& name, torch::optim::Optimizer& optimizer) {
  check_name(name);
  m_impl->optimizers.emplace_back(name, &optimizer);
}
void Checkpoint::track(ElasticSampler& sampler) {
  m_impl->sampler = &sampler;
}
void Checkpoint::track(const std::string& name, Checkpointable& object) {
  check_name(name);
  m_impl->objects.emplace_back(name, &object);
}
const fs::path& Checkpoint::directory() const {
  return m_impl->dir;
}

std::vector<fs::path> Checkpoint::list(const fs::path& dir) {
  std::vector<std::pair<int64_t, fs::path>> found;
  std::error_code ec;
  for (const auto& entry : fs::directory_iterator(dir, ec)) {
    if (auto step = step_of(entry.path()); step && entry.is_directory())
      found.emplace_back(*step, entry.path());
  }
  std::sort(found.begin(), found.end(),
            [](const auto& a, const auto& b) { return a.first > b.first; });
  std::vector<fs::path> out;
  for (auto& f : found) out.push_back(std::move(f.second));
  return out;
}

void Checkpoint::Impl::write_files(const fs::path& tmp, int64_t step,
                                   const std::map<std::string, double>& values,
                                   std::vector<std::string>& names) const {
  for (const auto& [name, module] : modules) {
    torch::serialize::OutputArchive archive;
    module->save(archive);
    names.push_back("module-" + name + ".pt");
    archive.save_to((tmp / names.back()).string());
  }
  for (const auto& [name, optimizer] : optimizers) {
    torch::serialize::OutputArchive archive;
    optimizer->save(archive);
    names.push_back("optimizer-" + name + ".pt");
    archive.save_to((tmp / names.back()).string());
  }
  for (const auto& [name, object] : objects) {
    names.push_back("state-" + name + ".txt");
    std::ofstream out(tmp / names.back(), std::ios::binary);
    out << object->checkpoint_state();
    if (!out.flush())
      throw CheckpointError(fmt::format("cannot write {}", (tmp / names.back()).string()));
  }
  std::ostringstream state;
  state << "step " << step << "\n"
        << "world_size " << context.world_size() << "\n"
        << "restart_count " << context.restart_count() << "\n"
        << "dlrun_version " << k_version << "\n";
  if (sampler) {
    const SamplerState s = sampler->state();
    state << "sampler.epoch " << s.epoch << "\nsampler.position " << s.position << "\nsampler.seed "
          << s.seed << "\nsampler.dataset_size " << s.dataset_size << "\n";
  }
  for (const auto& [key, value] : values)
    state << "value." << key << " " << fmt::format("{:.17g}", value) << "\n";
  {
    std::ofstream out(tmp / k_state_file, std::ios::binary);
    out << state.str();
    if (!out.flush())
      throw CheckpointError(fmt::format("cannot write {}", (tmp / k_state_file).string()));
  }
  names.push_back(k_state_file);
  for (const auto& name : names) runtime::manifest::sync_path(tmp / name);
}

fs::path Checkpoint::save(int64_t step, const std::map<std::string, double>& values) {
  for (const auto& [key, value] : values) check_name(key);
  const fs::path final_dir = m_impl->dir / dir_name(step);
  std::string failure;
  if (m_impl->context.is_main()) {
    const fs::path tmp = m_impl->dir / fmt::format("{}{:012d}.{}", k_temp_prefix, step, ::getpid());
    try {
      fs::create_directories(m_impl->dir);
      runtime::remove_tree(tmp);
      fs::create_directory(tmp);
      std::vector<std::string> names;
      m_impl->write_files(tmp, step, values, names);
      runtime::manifest::write(tmp, names);
      runtime::manifest::sync_path(tmp);
      if (fs::exists(final_dir)) runtime::remove_tree(final_dir);  // the same step saved again
      fs::rename(tmp, final_dir);
      runtime::manifest::sync_path(m_impl->dir);
      m_impl->prune();
      log::info("checkpoint of step {} saved to {}", step, final_dir.string());
    } catch (const std::exception& e) {
      failure = e.what();
      std::error_code ignored;
      runtime::remove_tree(tmp, ignored);
    }
  }
  // Everyone learns whether rank 0 succeeded, so no rank exits believing in a checkpoint.
  const int64_t ok = m_impl->context.broadcast(failure.empty() ? 1 : 0);
  if (!failure.empty()) {
    throw CheckpointError(fmt::format("could not save the checkpoint of step {} to {}: {}", step,
                                      m_impl->dir.string(), failure));
  }
  if (ok == 0) {
    throw CheckpointError(
        fmt::format("rank 0 could not save the checkpoint of step {} (its log "
                    "says why)",
                    step));
  }
  return final_dir;
}

void Checkpoint::Impl::prune() const {
  auto complete = Checkpoint::list(dir);
  for (size_t i = static_cast<size_t>(options.keep_last); i < complete.size(); ++i) {
    std::error_code ec;
    runtime::remove_tree(complete[i], ec);
  }
  // Leftovers of saves that were killed half-way.
  std::error_code ec;
  for (const auto& entry : fs::directory_iterator(dir, ec)) {
    const std::string name = entry.path().filename().string();
    if (name.rfind(k_temp_prefix, 0) == 0) runtime::remove_tree(entry.path(), ec);
  }
}

std::optional<int64_t> Checkpoint::Impl::choose() const {
  const auto candidates = Checkpoint::list(dir);
  for (size_t i = 0; i < candidates.size(); ++i) {
    auto problem = runtime::manifest::verify(candidates[i]);
    if (!problem) return step_of(candidates[i]);
    log::warn("checkpoint {} is damaged ({}): {}", candidates[i].string(), *problem,
              i + 1 < candidates.size()
                  ? fmt::format("falling back to {}", candidates[i + 1].filename().string())
                  : std::string("no older checkpoint is left"));
  }
  if (!candidates.empty()) {
    throw CheckpointError(fmt::format(
        "none of the {} checkpoints in {} can be loaded (see the warnings above): move the "
        "directory away to start afresh",
        candidates.size(), dir.string()));
  }
  return std::nullopt;
}

CheckpointInfo Checkpoint::Impl::load(const fs::path& path) const {
  if (auto problem = runtime::manifest::verify(path)) {
    throw CheckpointError(
        fmt::format("rank {}: checkpoint {} is damaged ({}), though rank 0 "
                    "could read it: do all ranks see the same files?",
                    context.rank(), path.string(), *problem));
  }
  Values state = read_state(path / k_state_file);
  CheckpointInfo info;
  info.path = path;
  try {
    info.step = std::stoll(state.at("step"));
    info.saved_world_size = std::stoi(state.at("world_size"));
    info.saved_restart_count = std::stoi(state.at("restart_count"));
    for (const auto& [key, value] : state) {
      if (key.rfind("value.", 0) == 0) info.values[key.substr(6)] = std::stod(value);
    }
    for (const auto& [name, module] : modules) {
      torch::serialize::InputArchive archive;
      archive.load_from((path / ("module-" + name + ".pt")).string());
      load_in_place(*module, archive);
    }
    for (const auto& [name, optimizer] : optimizers) {
      torch::serialize::InputArchive archive;
      // Optimizer state belongs with the parameters: a checkpoint of CPU ranks resumes on GPUs.
      archive.load_from((path / ("optimizer-" + name + ".pt")).string(), parameter_device(*optimizer));
      optimizer->load(archive);
    }
    for (const auto& [name, object] : objects) {
      std::ifstream in(path / ("state-" + name + ".txt"), std::ios::binary);
      if (!in) throw CheckpointError(fmt::format("{} has no state-{}.txt", path.string(), name));
      std::ostringstream text;
      text << in.rdbuf();
      object->restore_checkpoint_state(text.str());
    }
    if (sampler) {
      SamplerState s;
      s.epoch = std::stoll(state.at("sampler.epoch"));
      s.position = std::stoll(state.at("sampler.position"));
      s.seed = std::stoull(state.at("sampler.seed"));
      s.dataset_size = std::stoll(state.at("sampler.dataset_size"));
      sampler->restore(s);
    }
  } catch (const Error&) {
    throw;
  } catch (const std::exception& e) {
    throw CheckpointError(
        fmt::format("cannot load checkpoint {}: {} (was it written by a "
                    "program tracking other objects?)",
                    path.string(), e.what()));
  }
  return info;
}

std::optional<CheckpointInfo> Checkpoint::restore() {
  int64_t chosen = -1;
  std::string failure;
  if (m_impl->context.is_main()) {
    try {
      if (auto step = m_impl->choose()) chosen = *step;
    } catch (const std::exception& e) {
      failure = e.what();
      chosen = -2;
    }
  }
  chosen = m_impl->context.broadcast(chosen);
  if (chosen == -2) {
    throw CheckpointError(
        failure.empty() ? "rank 0 could not choose a checkpoint (its log says why)" : failure);
  }
  if (chosen < 0) return std::nullopt;
  CheckpointInfo info = m_impl->load(m_impl->dir / dir_name(chosen));
  log::debug("rank {}: resumed from {} (step {}, saved by {} ranks)", m_impl->context.rank(),
             info.path.string(), info.step, info.saved_world_size);
  return info;
}

}  // namespace dlrun
