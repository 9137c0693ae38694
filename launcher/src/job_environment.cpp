#include "dlrun/launcher/job_environment.hpp"

#include <algorithm>
#include <cctype>

#include <fmt/format.h>

#include "dlrun/error.hpp"

#include "dlrun/protocol.hpp"

namespace dlrun::launcher {
namespace {

constexpr std::string_view k_names[] = {
    "PATH",   "HOME",       "USER",        "LOGNAME",       "SHELL",       "LANG",  "LANGUAGE",
    "TZ",     "TERM",       "TMPDIR",      "LD_LIBRARY_PATH", "VIRTUAL_ENV", "HOSTNAME",
};
constexpr std::string_view k_prefixes[] = {
    "LC_",  "XDG_",    "DLRUN_", "CUDA_", "NCCL_", "GLOO_",  "OMP_",  "MKL_",
    "OPENBLAS_", "TORCH_", "PYTORCH_", "PYTHON", "CONDA_",
};

bool starts_with(std::string_view text, std::string_view prefix) { return text.substr(0, prefix.size()) == prefix; }

bool matches(std::string_view name, std::string_view pattern) {
  if (!pattern.empty() && pattern.back() == '*') return starts_with(name, pattern.substr(0, pattern.size() - 1));
  return name == pattern;
}

}  // namespace

bool exported_by_default(std::string_view name) {
  return std::find(std::begin(k_names), std::end(k_names), name) != std::end(k_names) ||
         std::any_of(std::begin(k_prefixes), std::end(k_prefixes), [&](auto p) { return starts_with(name, p); });
}

bool valid_export_pattern(std::string_view pattern) {
  if (pattern == "*") return true;
  if (!pattern.empty() && pattern.back() == '*') pattern.remove_suffix(1);
  if (pattern.empty() || std::isdigit(static_cast<unsigned char>(pattern.front()))) return false;
  return std::all_of(pattern.begin(), pattern.end(),
                     [](char c) { return std::isalnum(static_cast<unsigned char>(c)) || c == '_'; });
}

Environment job_environment(const Environment& submitter, const std::vector<std::string>& export_env) {
  Environment kept;
  for (const auto& [name, value] : submitter) {
    // A job submitted from a rank of another job is not part of that job: it must not carry
    // its supervisor's token (escaped_processes.hpp), or that job's end would kill it.
    if (name == env::k_supervisor_id) continue;
    if (exported_by_default(name) ||
        std::any_of(export_env.begin(), export_env.end(), [&](const auto& p) { return matches(name, p); })) {
      kept.emplace(name, value);
    }
  }
  return kept;
}

Environment sbatch_environment(const Environment& submitter, const std::vector<std::string>& export_env) {
  Environment env = job_environment(submitter, export_env);
  for (const auto& [name, value] : submitter) {
    if (starts_with(name, "SLURM_") || starts_with(name, "SBATCH_")) env.emplace(name, value);
  }
  return env;
}

Environment exported_by_name(const Environment& env, const std::vector<std::string>& export_env) {
  Environment named;
  for (const auto& [name, value] : env) {
    if (name == env::k_supervisor_id) continue;
    if (std::any_of(export_env.begin(), export_env.end(), [&](const auto& p) { return matches(name, p); })) {
      named.emplace(name, value);
    }
  }
  return named;
}

std::optional<std::string> reserved_env(const std::string& name) {
  static const std::vector<std::string> per_rank = per_rank_variables();
  if (name == env::k_checkpoint_dir) {
    return fmt::format("env '{}' is set by dlrun: use checkpoint_dir = \"...\" for the job's checkpoint directory",
                       name);
  }
  if (std::binary_search(per_rank.begin(), per_rank.end(), name)) {
    return fmt::format("env '{}' is set by dlrun for each rank (docs/channels.md): remove it from [env]", name);
  }
  return std::nullopt;
}

Environment forwarded_environment(const Environment& here, const std::vector<std::string>& given) {
  Environment out = exported_by_name(here, {"NCCL_*"});
  for (const auto& item : given) {
    const auto equals = item.find('=');
    const std::string name = item.substr(0, equals);
    const bool pattern = !name.empty() && name.back() == '*';
    if (!valid_export_pattern(name) || (pattern && equals != std::string::npos)) {
      throw ConfigError(fmt::format("-x {}: give NAME=VALUE, NAME (as this shell has it), or PREFIX* (every variable "
                                    "of this shell that starts so); names are letters, digits and _",
                                    item));
    }
    if (!pattern) {
      if (auto why = reserved_env(name); why || name == env::k_supervisor_id) {
        throw ConfigError(fmt::format("-x {}: dlrun sets {} for each rank (docs/channels.md)", item, name));
      }
    }
    if (equals != std::string::npos) {
      out[name] = item.substr(equals + 1);
    } else if (pattern) {
      for (const auto& [key, value] : exported_by_name(here, {name})) {
        if (!reserved_env(key)) out[key] = value;  // exported_by_name leaves out DLRUN_SUPERVISOR_ID
      }
    } else if (auto it = here.find(name); it != here.end()) {
      out[name] = it->second;
    } else {
      throw ConfigError(fmt::format("-x {}: not set in this shell (give -x {}=VALUE, or export it first)", name, name));
    }
  }
  return out;
}

std::vector<std::string> unmatched_env_patterns(const Environment& here, const std::vector<std::string>& given) {
  std::vector<std::string> out;
  for (const auto& item : given) {
    if (item.empty() || item.back() != '*' || item.find('=') != std::string::npos) continue;
    const std::string prefix = item.substr(0, item.size() - 1);
    const bool any = std::any_of(here.begin(), here.end(), [&](const auto& kv) {
      return kv.first.compare(0, prefix.size(), prefix) == 0 && !reserved_env(kv.first) &&
             kv.first != env::k_supervisor_id;
    });
    if (!any && std::find(out.begin(), out.end(), item) == out.end()) out.push_back(item);
  }
  return out;
}

std::vector<std::string> variables_left_behind(const std::vector<std::string>& command, const Environment& submitter,
                                               const Environment& kept, const Environment& job_env) {
  std::vector<std::string> names;
  const auto name_char = [](char c) { return std::isalnum(static_cast<unsigned char>(c)) || c == '_'; };
  for (const auto& word : command) {
    for (size_t at = word.find('$'); at != std::string::npos; at = word.find('$', at + 1)) {
      size_t begin = at + 1;
      const bool braced = begin < word.size() && word[begin] == '{';
      if (braced) ++begin;
      size_t end = begin;
      while (end < word.size() && name_char(word[end])) ++end;
      if (end == begin || std::isdigit(static_cast<unsigned char>(word[begin]))) continue;  // $1, $$, $?
      if (braced && (end >= word.size() || (word[end] != '}' && word[end] != ':' && word[end] != '-'))) continue;
      std::string name = word.substr(begin, end - begin);
      if (!submitter.count(name) || kept.count(name) || job_env.count(name)) continue;
      if (std::find(names.begin(), names.end(), name) == names.end()) names.push_back(std::move(name));
    }
  }
  return names;
}

std::string encode_environment(const Environment& env) {
  std::string blob;
  for (const auto& [key, value] : env) {
    blob += key;
    blob += '=';
    blob += value;
    blob += '\0';
  }
  return blob;
}

Environment decode_environment(const std::string& blob) {
  Environment env;
  size_t start = 0;
  while (start < blob.size()) {
    size_t end = blob.find('\0', start);
    if (end == std::string::npos) end = blob.size();
    std::string entry = blob.substr(start, end - start);
    auto eq = entry.find('=');
    if (eq != std::string::npos) env[entry.substr(0, eq)] = entry.substr(eq + 1);
    start = end + 1;
  }
  return env;
}

}  // namespace dlrun::launcher
