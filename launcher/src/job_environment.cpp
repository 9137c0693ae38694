#include "dlrun/launcher/job_environment.hpp"

#include <algorithm>
#include <cctype>

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

}  // namespace dlrun::launcher
