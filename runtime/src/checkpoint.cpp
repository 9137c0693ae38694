#include "dlrun/checkpoint.hpp"

#include <fmt/format.h>
#include <fmt/ranges.h>
#include <torch/nn/module.h>
#include <torch/optim/optimizer.h>
#include <torch/serialize/input-archive.h>
#include <torch/serialize/output-archive.h>
#include <torch/csrc/distributed/c10d/Store.hpp>
#include <torch/utils.h>
#include <c10/util/Type.h>
#include <fcntl.h>
#include <unistd.h>

#include <algorithm>
#include <cctype>
#include <cstdio>
#include <cstdlib>
#include <cerrno>
#include <cstring>
#include <typeinfo>

#include "checkpoint_manifest.hpp"
#include "directory_lock.hpp"
#include "progress_beat.hpp"
#include "context_state.hpp"
#include "error_text.hpp"
#include "remove_tree.hpp"
#include "text_file.hpp"
#include "dlrun/text_fields.hpp"
#include "dlrun/elastic_sampler.hpp"
#include "dlrun/log.hpp"
#include "dlrun/version.hpp"
#include "dlrun/runtime_errors.hpp"

namespace fs = std::filesystem;

namespace dlrun {
namespace {
using runtime::read_text;
using runtime::write_text;

constexpr const char* k_prefix = "step-";
constexpr const char* k_temp_prefix = ".tmp-step-";
constexpr const char* k_superseded_prefix = "superseded-";
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

// Without std::regex: a pip torch's libtorch exports its own instances of std::regex's
// templates, which a Python process binds the runtime to, and which crash there (as
// std::filesystem::remove_all does, remove_tree.hpp).
void check_name(const std::string& name, const char* where = "Checkpoint::track") {
  const auto allowed = [](unsigned char c) { return std::isalnum(c) || c == '_' || c == '-'; };
  if (name.empty() || !std::all_of(name.begin(), name.end(), allowed)) {
    throw ConfigError(
        fmt::format("{}: '{}' is not a valid name (use letters, "
                    "digits, '_' and '-')",
                    where, name));
  }
}

// A second object of one kind under one name would write the first's file, and a restore would
// load one object's state into both.
template <typename Tracked>
void check_new_name(const std::vector<std::pair<std::string, Tracked>>& tracked, const std::string& name,
                    const char* kind) {
  check_name(name);
  for (const auto& [other, unused] : tracked) {
    if (other == name) {
      throw ConfigError(fmt::format("Checkpoint::track: a {} named '{}' is tracked already (one file per name: "
                                    "give each its own)",
                                    kind, name));
    }
  }
}

// A module's tensors and the checkpoint's values for them, read before any is changed: a
// checkpoint that does not fit (a tensor missing, another shape) changes nothing.
struct PendingCopies {
  std::vector<std::pair<at::Tensor, at::Tensor>> copies;  // the module's tensor, the checkpoint's

  // As torch::nn::Module::load, but for copying into the existing tensors later (apply()).
  // Module::load replaces each parameter's data with set_(), after which autograd creates a new
  // gradient accumulator for it, and the hooks DataParallel's reducer put on the old one never
  // fire again: gradients would silently stop being reduced after a restore.
  void read(torch::nn::Module& module, torch::serialize::InputArchive& archive, const std::string& prefix) {
    auto take = [&](const std::string& key, const at::Tensor& mine, bool is_buffer) {
      at::Tensor loaded;
      archive.read(key, loaded, is_buffer);
      // copy_ broadcasts: a [N] tensor would fill a [M, N] one without a word.
      if (loaded.sizes() != mine.sizes()) {
        throw CheckpointError(fmt::format("its {} '{}{}' has shape {}, the module's has {}",
                                          is_buffer ? "buffer" : "parameter", prefix, key,
                                          fmt::join(loaded.sizes(), "x"), fmt::join(mine.sizes(), "x")));
      }
      copies.emplace_back(mine, std::move(loaded));
    };
    for (auto& param : module.named_parameters(/*recurse=*/false)) take(param.key(), param.value(), false);
    for (auto& buffer : module.named_buffers(/*recurse=*/false)) take(buffer.key(), buffer.value(), true);
    for (const auto& child : module.named_children()) {
      torch::serialize::InputArchive child_archive;
      archive.read(child.key(), child_archive);
      read(*child.value(), child_archive, prefix + child.key() + ".");
    }
  }

  void apply() {
    torch::NoGradGuard no_grad;
    for (auto& [mine, loaded] : copies) mine.copy_(loaded);
    copies.clear();
  }
};

// The optimizer's class, as a checkpoint records it ("torch::optim::Adam").
std::string optimizer_type(const torch::optim::Optimizer& optimizer) {
  std::string name = c10::demangle(typeid(optimizer).name());
  for (char& c : name) {
    if (c == ' ' || c == '\n') c = '_';  // one word on its state line
  }
  return name;
}

// Where the optimizer's parameters live (its state must be there too); none if it has none.
c10::optional<c10::Device> parameter_device(const torch::optim::Optimizer& optimizer) {
  for (const auto& group : optimizer.param_groups()) {
    if (!group.params().empty()) return group.params().front().device();
  }
  return c10::nullopt;
}

using Values = std::map<std::string, std::string>;

// LibTorch's archive writer throws from its destructor when a write fails (a full disk), which
// ends the process (std::terminate) instead of reaching our catch: its writes go through this
// function, which never fails one and keeps the first error for after the archive is done.
void save_archive(torch::serialize::OutputArchive& archive, const fs::path& path) {
  const int fd = ::open(path.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  if (fd < 0) {
    throw CheckpointError(fmt::format("cannot create {}: {}", path.string(), std::strerror(errno)));
  }
  int error = 0;
  archive.save_to([&](const void* data, size_t size) -> size_t {
    const char* bytes = static_cast<const char*>(data);
    for (size_t done = 0; error == 0 && done < size;) {
      const ssize_t n = ::write(fd, bytes + done, size - done);
      if (n > 0) {
        done += static_cast<size_t>(n);
      } else if (n < 0 && errno != EINTR) {
        error = errno;
      }
    }
    return size;
  });
  if (::close(fd) != 0 && error == 0) error = errno;
  if (error != 0) {
    throw CheckpointError(fmt::format("cannot write {}: {}", path.string(), std::strerror(error)));
  }
}

using runtime::message_of;

const std::string& state_value(const Values& state, const std::string& key, const char* what) {
  auto found = state.find(key);
  if (found == state.end()) {
    throw CheckpointError(fmt::format("its state.txt has no {} ('{}')", what, key));
  }
  return found->second;
}

// The checkpoint's file for a tracked object, or an error that names what it holds instead.
fs::path tracked_file(const fs::path& checkpoint, const std::string& kind, const std::string& name,
                      const char* suffix) {
  const fs::path file = checkpoint / (kind + "-" + name + suffix);
  if (fs::exists(file)) return file;
  std::vector<std::string> held;
  std::error_code ec;
  for (const auto& entry : fs::directory_iterator(checkpoint, ec)) {
    const std::string other = entry.path().filename().string();
    if (other.rfind(kind + "-", 0) == 0) held.push_back("'" + other.substr(kind.size() + 1, other.size() - kind.size() - 1 - std::strlen(suffix)) + "'");
  }
  std::sort(held.begin(), held.end());
  throw CheckpointError(fmt::format("it holds no {} '{}' ({})", kind, name,
                                    held.empty() ? fmt::format("no {} at all", kind)
                                                 : fmt::format("its {}: {}", kind, fmt::join(held, ", "))));
}

// What rank 0 found wrong, for the other ranks' messages (through the store: the broadcast
// carries a number only). Nothing in a world of one.
void share_failure(const Context& context, const std::string& key, const std::string& failure) {
  const auto& store = context.state().store;
  if (!store || failure.empty()) return;
  try {
    store->set(key, std::vector<uint8_t>(failure.begin(), failure.end()));
  } catch (const std::exception&) {
  }
}

std::string shared_failure(const Context& context, const std::string& key) {
  const auto& store = context.state().store;
  if (!store) return {};
  try {
    if (!store->check({key})) return {};
    const std::vector<uint8_t> bytes = store->get(key);
    return std::string(bytes.begin(), bytes.end());
  } catch (const std::exception&) {
    return {};
  }
}

// Rank 0, before anything is trained: a directory checkpoints cannot be read from or written to
// fails now, not at the first save an epoch later (nor is an unreadable one taken for empty).
void check_directory(const fs::path& dir) {
  std::error_code ec;
  const auto status = fs::status(dir, ec);
  fs::path probe = dir;
  if (fs::exists(status)) {
    if (!fs::is_directory(status)) {
      throw CheckpointError(fmt::format("the checkpoint directory {} is not a directory", dir.string()));
    }
    if (::access(dir.c_str(), R_OK | X_OK) != 0) {
      throw CheckpointError(fmt::format("cannot read the checkpoint directory {}: {}", dir.string(),
                                        std::strerror(errno)));
    }
  } else {
    // The nearest existing directory above it is where it will be created.
    probe = dir.parent_path();
    while (!probe.empty() && !fs::exists(probe, ec)) probe = probe.parent_path();
    if (probe.empty()) probe = ".";
    if (!fs::is_directory(probe, ec)) {
      throw CheckpointError(fmt::format("cannot create the checkpoint directory {}: {} is not a directory",
                                        dir.string(), probe.string()));
    }
    // Made now (a save would make it): access() says yes to root where nothing can be made
    // (/proc, /sys), and the directory is what rank 0 locks.
    if (::access(probe.c_str(), W_OK | X_OK) == 0 && !fs::create_directories(dir, ec) && ec) {
      throw CheckpointError(fmt::format("cannot create the checkpoint directory {}: {}; checked before training, so "
                                        "that no training is lost to a save that would fail",
                                        dir.string(), ec.message()));
    }
  }
  if (::access(probe.c_str(), W_OK | X_OK) != 0) {
    throw CheckpointError(fmt::format("cannot write checkpoints to {}: {} ({}); checked before training, so that "
                                      "no training is lost to a save that would fail",
                                      dir.string(), std::strerror(errno), probe.string()));
  }
}

// Each line's first field and the rest of the line after the blanks that follow it.
// DLRUN_JOB_ID when it is one word (empty outside dlrun).
std::string this_job() {
  const char* id = std::getenv("DLRUN_JOB_ID");
  if (!id || !*id) return {};
  for (const char* c = id; *c; ++c) {
    if (std::isspace(static_cast<unsigned char>(*c))) return {};
  }
  return id;
}

// Whether `job` is one this job goes on from (dlrun submit --resume: DLRUN_RESUMED_JOBS, "12,15").
bool resumed_from(const std::string& job) {
  const char* list = std::getenv("DLRUN_RESUMED_JOBS");
  if (!list) return false;
  const std::string ids = std::string(",") + list + ",";
  return ids.find("," + job + ",") != std::string::npos;
}

Values read_state(const fs::path& path) {
  Values values;
  std::string content;
  if (!read_text(path, content)) return values;
  for (const std::string_view line : text::lines(content)) {
    const auto fields = text::fields(line);
    if (fields.empty()) continue;
    const size_t key_end = static_cast<size_t>(fields[0].data() - line.data()) + fields[0].size();
    const size_t rest = line.find_first_not_of(" \t\r", key_end);
    if (rest == std::string_view::npos) continue;
    std::string_view value = line.substr(rest);
    while (!value.empty() && (value.back() == '\r' || value.back() == ' ')) value.remove_suffix(1);
    values[std::string(fields[0])] = std::string(value);
  }
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
  bool restore_called = false;  // restore() ran: a save below a later checkpoint went back on purpose

  void write_files(const fs::path& tmp, int64_t step, const std::map<std::string, double>& values,
                   std::vector<std::string>& names) const;
  void prune() const;
  void set_aside_later_than(int64_t step) const;
  std::optional<int64_t> choose() const;
  CheckpointInfo load(const fs::path& path) const;
};

Checkpoint::Checkpoint(Context context, fs::path dir, CheckpointOptions options)
    : m_impl(std::make_unique<Impl>()) {
  m_impl->context = std::move(context);
  m_impl->dir = std::move(dir);
  m_impl->options = options;
  if (options.keep_last < 1) throw ConfigError("Checkpoint: keep_last must be at least 1");
  // Context::checkpoint_dir() is empty outside dlrun: refused now, not at the first save.
  if (m_impl->dir.empty()) {
    throw ConfigError(
        "Checkpoint: no directory (ctx.checkpoint_dir() is empty when the program runs without dlrun: "
        "give one)");
  }
}

Checkpoint::~Checkpoint() = default;

namespace {
// Tracked after restore(): saved from now on, but this run did not resume it.
void warn_late_track(bool restored, const Context& context, const std::string& what) {
  if (!restored || !context.is_main()) return;
  log::warn("Checkpoint: {} is tracked after restore(): it is saved from now on, but was not restored in this run "
            "(track everything before restore())",
            what);
}
}  // namespace

void Checkpoint::track(const std::string& name, std::shared_ptr<torch::nn::Module> module) {
  warn_late_track(m_impl->restore_called, m_impl->context, "module '" + name + "'");
  check_new_name(m_impl->modules, name, "module");
  m_impl->modules.emplace_back(name, std::move(module));
}
void Checkpoint::track(const std::string& name, torch::optim::Optimizer& optimizer) {
  warn_late_track(m_impl->restore_called, m_impl->context, "optimizer '" + name + "'");
  check_new_name(m_impl->optimizers, name, "optimizer");
  m_impl->optimizers.emplace_back(name, &optimizer);
}
void Checkpoint::track(ElasticSampler& sampler) {
  warn_late_track(m_impl->restore_called, m_impl->context, "the sampler");
  m_impl->sampler = &sampler;
}
void Checkpoint::track(const std::string& name, Checkpointable& object) {
  warn_late_track(m_impl->restore_called, m_impl->context, "'" + name + "'");
  check_new_name(m_impl->objects, name, "state object");
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
    save_archive(archive, tmp / names.back());
  }
  for (const auto& [name, optimizer] : optimizers) {
    torch::serialize::OutputArchive archive;
    optimizer->save(archive);
    names.push_back("optimizer-" + name + ".pt");
    save_archive(archive, tmp / names.back());
  }
  for (const auto& [name, object] : objects) {
    names.push_back("state-" + name + ".txt");
    write_text(tmp / names.back(), object->checkpoint_state());
  }
  std::string state = fmt::format("step {}\nworld_size {}\nrestart_count {}\ndlrun_version {}\n", step,
                                  context.world_size(), context.restart_count(), k_version);
  // Which dlrun job saved it: a job that resumes from another job's checkpoint is told so.
  if (const std::string job = this_job(); !job.empty()) state += fmt::format("job_id {}\n", job);
  if (sampler) {
    const SamplerState s = sampler->state();
    state += fmt::format("sampler.epoch {}\nsampler.position {}\nsampler.seed {}\nsampler.dataset_size {}\n",
                         s.epoch, s.position, s.seed, s.dataset_size);
  }
  for (const auto& [name, optimizer] : optimizers) {
    state += fmt::format("optimizer.{}.type {}\n", name, optimizer_type(*optimizer));
  }
  for (const auto& [key, value] : values) state += fmt::format("value.{} {:.17g}\n", key, value);
  write_text(tmp / k_state_file, state);
  names.push_back(k_state_file);
  for (const auto& name : names) runtime::manifest::sync_path(tmp / name);
}

fs::path Checkpoint::save(int64_t step, const std::map<std::string, double>& values) {
  // A negative step made "step--00000000003", which restore() never finds: a fresh start.
  if (step < 0) throw ConfigError(fmt::format("Checkpoint::save: the step must be 0 or more, not {}", step));
  if (m_impl->context.state().agreed_stop) m_impl->context.state().saved_after_stop = true;
  for (const auto& [key, value] : values) check_name(key, "Checkpoint::save (a value's name)");
  const runtime::ProgressBeat beat(m_impl->context.state().progress_file);  // a slow disk is no hang
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
      try {
        runtime::manifest::sync_path(m_impl->dir);
      } catch (const std::exception& e) {
        log::warn("checkpoint of step {} saved to {}, but its directory could not be synced ({}): a power loss now "
                  "may lose it",
                  step, final_dir.string(), message_of(e));
      }
      m_impl->set_aside_later_than(step);
      m_impl->prune();
      log::info("checkpoint of step {} saved to {}", step, final_dir.string());
    } catch (const std::exception& e) {
      failure = fmt::format("could not save the checkpoint of step {} to {}: {}", step, m_impl->dir.string(),
                            message_of(e));
      std::error_code ignored;
      runtime::remove_tree(tmp, ignored);
    }
  }
  const std::string key = fmt::format("dlrun/checkpoint/save/{}", step);
  share_failure(m_impl->context, key, failure);
  // Everyone learns whether rank 0 succeeded, so no rank exits believing in a checkpoint.
  const int64_t ok = m_impl->context.broadcast(failure.empty() ? 1 : 0);
  if (!failure.empty()) throw CheckpointError(failure);
  if (ok == 0) {
    const std::string why = shared_failure(m_impl->context, key);
    throw CheckpointError(why.empty() ? fmt::format("rank 0 could not save the checkpoint of step {} (its log says why)",
                                                    step)
                                      : "rank 0 " + why);
  }
  return final_dir;
}

void Checkpoint::Impl::set_aside_later_than(int64_t step) const {
  // Checkpoints of later steps than the one just saved belong to a run this one went back from
  // (a restore of an earlier step, or a start afresh in the same directory): restore() takes the
  // latest step, so they would be resumed instead of this run's own, and with keep_last they
  // pruned this run's saves at once. They are moved aside, never removed.
  std::vector<std::string> moved;
  for (const auto& path : Checkpoint::list(dir)) {
    if (step_of(path).value_or(-1) <= step) break;  // newest first
    fs::path target = dir / (k_superseded_prefix + path.filename().string());
    for (int n = 2; fs::exists(target); ++n) {
      target = dir / fmt::format("{}{}.{}", k_superseded_prefix, path.filename().string(), n);
    }
    std::error_code ec;
    fs::rename(path, target, ec);
    if (ec) {
      throw CheckpointError(fmt::format("{} is of a later step than this run's {} and could not be moved aside ({}): "
                                        "a restart would resume from it",
                                        path.string(), step, ec.message()));
    }
    moved.push_back(target.filename().string());
  }
  if (!moved.empty()) {
    log::warn("{} held checkpoints of later steps than this run's {}, of a run it went back from: moved aside as "
              "{} (never restored; remove them when no longer needed){}",
              dir.string(), step, fmt::join(moved, ", "),
              restore_called ? "" : ". This run never called restore(): to resume, call it after track() and before "
                                    "training");
  }
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
  check_directory(dir);
  runtime::mark_checkpoint_directory_in_use(dir);
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
  std::vector<std::string> restored;  // what holds the checkpoint's state by now
  try {
    info.step = std::stoll(state_value(state, "step", "step"));
    info.saved_world_size = std::stoi(state_value(state, "world_size", "world size"));
    info.saved_restart_count = std::stoi(state_value(state, "restart_count", "restart count"));
    if (auto job = state.find("job_id"); job != state.end()) info.saved_by_job = job->second;
    for (const auto& [key, value] : state) {
      if (key.rfind("value.", 0) != 0) continue;
      // from_chars: std::stod refused a subnormal (1e-310), which left the checkpoint unreadable.
      double number = 0;
      if (!text::parse(value, number)) throw std::invalid_argument("bad number for " + key + ": " + value);
      info.values[key.substr(6)] = number;
    }
    // Everything that can be read and checked before a tracked object changes is: a checkpoint
    // of another model, or of a program tracking other objects, leaves them all as they were.
    for (const auto& [name, optimizer] : optimizers) {
      // (Checkpoints of dlrun before 0.1 say nothing of it: LibTorch's load judges those.)
      const auto saved = state.find("optimizer." + name + ".type");
      if (saved == state.end() || saved->second == optimizer_type(*optimizer)) continue;
      throw CheckpointError(fmt::format("optimizer '{}' was saved by a {}, and this program tracks a {} under that "
                                        "name",
                                        name, saved->second, optimizer_type(*optimizer)));
    }
    PendingCopies weights;
    for (const auto& [name, module] : modules) {
      torch::serialize::InputArchive archive;
      archive.load_from(tracked_file(path, "module", name, ".pt").string());
      try {
        weights.read(*module, archive, "");
      } catch (const std::exception& e) {
        throw CheckpointError(fmt::format("module '{}': {}", name, message_of(e)));
      }
    }
    std::vector<std::string> texts;
    for (const auto& [name, object] : objects) {
      texts.emplace_back();
      if (!read_text(tracked_file(path, "state", name, ".txt"), texts.back()))
        throw CheckpointError(fmt::format("cannot read state-{}.txt", name));
    }
    for (size_t i = 0; i < objects.size(); ++i) objects[i].second->check_checkpoint_state(texts[i]);
    std::optional<SamplerState> sampler_state;
    if (sampler) {
      SamplerState s;
      const char* what = "sampler position (the program that wrote it tracked no ElasticSampler)";
      s.epoch = std::stoll(state_value(state, "sampler.epoch", what));
      s.position = std::stoll(state_value(state, "sampler.position", what));
      s.seed = std::stoull(state_value(state, "sampler.seed", what));
      s.dataset_size = std::stoll(state_value(state, "sampler.dataset_size", what));
      sampler_state = s;
    }
    std::vector<std::string> optimizer_files;
    for (const auto& [name, optimizer] : optimizers) {
      optimizer_files.push_back(tracked_file(path, "optimizer", name, ".pt").string());
    }
    // The sampler first: its restore refuses another data set or seed before it changes
    // anything, so that refusal too leaves everything as it was.
    if (sampler_state) {
      sampler->restore(*sampler_state);
      restored.push_back("the sampler");
    }
    weights.apply();
    for (const auto& [name, module] : modules) restored.push_back("module '" + name + "'");
    for (size_t i = 0; i < optimizers.size(); ++i) {
      auto* optimizer = optimizers[i].second;
      torch::serialize::InputArchive archive;
      // Optimizer state belongs with the parameters: a checkpoint of CPU ranks resumes on GPUs.
      archive.load_from(optimizer_files[i], parameter_device(*optimizer));
      optimizer->load(archive);
      restored.push_back("optimizer '" + optimizers[i].first + "'");
    }
    for (size_t i = 0; i < objects.size(); ++i) {
      objects[i].second->restore_checkpoint_state(texts[i]);
      restored.push_back("'" + objects[i].first + "'");
    }
  } catch (const std::exception& e) {
    // What was restored before the failure stays restored: said, so that a program that
    // catches this does not start "afresh" from a checkpoint's weights.
    const std::string partly =
        restored.empty() ? "; nothing was restored from it"
                         : fmt::format("; {} had been restored from it by then (start afresh with new objects, not "
                                       "these)",
                                       fmt::join(restored, ", "));
    if (dynamic_cast<const ConfigError*>(&e)) {
      throw ConfigError(e.what() + partly);  // a restored object refuses what it holds (another data set)
    }
    throw CheckpointError(
        fmt::format("cannot load checkpoint {}: {} (was it written by a "
                    "program tracking other objects?){}",
                    path.string(), message_of(e), partly));
  }
  return info;
}

std::optional<CheckpointInfo> Checkpoint::restore() {
  m_impl->restore_called = true;
  const runtime::ProgressBeat beat(m_impl->context.state().progress_file);
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
  share_failure(m_impl->context, "dlrun/checkpoint/restore", failure);
  chosen = m_impl->context.broadcast(chosen);
  if (chosen == -2) {
    if (failure.empty()) failure = shared_failure(m_impl->context, "dlrun/checkpoint/restore");
    throw CheckpointError(failure.empty() ? "rank 0 could not choose a checkpoint (its log says why)" : failure);
  }
  if (chosen < 0) return std::nullopt;
  CheckpointInfo info = m_impl->load(m_impl->dir / dir_name(chosen));
  if (m_impl->context.is_main() && !info.saved_by_job.empty() && !this_job().empty() &&
      info.saved_by_job != this_job() && !resumed_from(info.saved_by_job)) {
    // Sweep jobs made from one job file share its checkpoint_dir: the second "resumed" the first's
    // last step, trained nothing, and reported the first's accuracy as its own.
    log::warn("resumed from the checkpoint of step {} that job {} saved in {}: this is job {}. Jobs that share a "
              "checkpoint directory go on from each other's steps; where that is not meant, give each its own "
              "(checkpoint_dir = \"ckpt/{{job_id}}\" in job.toml, or --checkpoint-dir)",
              info.step, info.saved_by_job, m_impl->dir.string(), this_job());
  }
  log::debug("rank {}: resumed from {} (step {}, saved by {} ranks)", m_impl->context.rank(),
             info.path.string(), info.step, info.saved_world_size);
  return info;
}

}  // namespace dlrun
