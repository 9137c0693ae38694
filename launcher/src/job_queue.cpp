#include "dlrun/launcher/job_queue.hpp"

#include <fcntl.h>
#include <signal.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cctype>
#include <cerrno>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <set>
#include <sstream>
#include <thread>

#include <fmt/format.h>

#include "dlrun/error.hpp"
#include "dlrun/launcher/escaped_processes.hpp"
#include "dlrun/launcher/new_job_codec.hpp"
#include "dlrun/launcher/fd_io.hpp"
#include "dlrun/launcher/job_environment.hpp"
#include "dlrun/launcher/job_metrics.hpp"
#include "dlrun/launcher/gpu_claims.hpp"
#include "dlrun/launcher/gpu_discovery.hpp"
#include "dlrun/launcher/job_spec.hpp"
#include "dlrun/launcher/machine_share.hpp"
#include "dlrun/log.hpp"
#include "dlrun/launcher/command_resolution.hpp"
#include "dlrun/launcher/process.hpp"
#include "dlrun/launcher/private_files.hpp"
#include "dlrun/launcher/foreground_job.hpp"
#include "dlrun/launcher/run_dir.hpp"
#include "dlrun/launcher/run_record.hpp"
#include "dlrun/launcher/job_result.hpp"
#include "dlrun/launcher/queue_settings.hpp"
#include "dlrun/launcher/run_retention.hpp"
#include "dlrun/launcher/scheduler_settings.hpp"
#include "dlrun/launcher/slurm.hpp"
#include "dlrun/launcher/text.hpp"
#include "dlrun/protocol.hpp"

namespace fs = std::filesystem;

namespace dlrun::launcher {
namespace {

std::string prepare_home(const Environment& env) {
  std::string home = dlrun_home(env);
  check_own_home(home);  // before anything is made in it, or in another user's directory
  std::error_code ec;
  fs::create_directories(home, ec);
  if (ec) {
    throw ConfigError(fmt::format("cannot create {}: {} (set {} to a writable directory)", home, ec.message(),
                                  env::k_home));
  }
  tighten_home(home);
  return home;
}

std::string self_executable() {
  std::error_code ec;
  auto path = fs::read_symlink("/proc/self/exe", ec);
  if (ec) throw SystemError("cannot find the dlrun executable (/proc/self/exe)", ec.value());
  return path.string();
}

ResourceRequest request_of(const JobSpec& spec) {
  ResourceRequest request;
  if (spec.on_slurm()) {  // Slurm's resources, not this machine's
    request.remote = true;
    request.uses_gpus = spec.slurm.gpus_per_node > 0;
    int per_node = spec.slurm.gpus_per_node > 0 ? spec.slurm.gpus_per_node : spec.slurm.ranks_per_node;
    request.min_ranks = request.max_ranks = spec.slurm.nodes * per_node;
    return request;
  }
  if (spec.remote()) {
    request.remote = true;
    request.uses_gpus = spec.gpu_slots;
    request.max_ranks = 0;
    for (const auto& host : hosts_of(spec)) request.max_ranks += host.slots;
    request.min_ranks = request.max_ranks;
    return request;
  }
  request.uses_gpus = spec.gpus.has_value();
  RankRange range = spec.gpus ? *spec.gpus : *spec.nproc;
  request.min_ranks = range.min;
  request.max_ranks = range.max;
  request.gpu_ids = spec.gpu_ids;
  request.goodput = spec.policy == SharePolicy::goodput;
  return request;
}

}  // namespace

std::vector<Host> hosts_of(const JobSpec& spec) {
  // Read at submit (the request counts the hosts' slots): a file that is not there is said then,
  // not when the job starts.
  if (!spec.ssh_config.empty() && ::access(spec.ssh_config.c_str(), R_OK) != 0) {
    throw ConfigError(fmt::format("ssh_config {}: cannot read it: {}", spec.ssh_config, std::strerror(errno)));
  }
  if (!spec.hosts.empty()) return parse_host_list(spec.hosts);
  std::ifstream file(spec.hostfile);
  if (!file) throw ConfigError(fmt::format("hostfile {}: cannot read it: {}", spec.hostfile, std::strerror(errno)));
  std::stringstream text;
  text << file.rdbuf();
  return parse_hostfile(text.str(), spec.hostfile);
}

JobQueue::JobQueue(const Environment& env)
    : m_env(env), m_home(prepare_home(env)), m_store(m_home + "/jobs.db") {}

std::string JobQueue::run_dir(int64_t id) const { return fmt::format("{}/jobs/{}", m_home, id); }

Environment JobQueue::slurm_environment(const JobRecord& job) {
  Environment env = m_env;
  if (!env.count("SLURM_CONF")) {
    // A listing leaves the environment out (job_list_columns): the job's own record has it.
    std::string blob = job.submitted.environment;
    if (blob.empty()) {
      if (auto full = m_store.get(job.id)) blob = full->submitted.environment;
    }
    const Environment submitted = decode_environment(blob);
    if (auto conf = submitted.find("SLURM_CONF"); conf != submitted.end()) env[conf->first] = conf->second;
  }
  return env;
}

JobState JobQueue::cancel_slurm(const JobRecord& job, bool force) {
  // A controller that does not answer at once (busy, just started) fails scancel now and then:
  // tried again for a few seconds, unless the job has ended meanwhile (the cancel went through).
  // A controller that does not answer at all makes each Slurm command wait out its
  // MessageTimeout (20 s): the tries end after 10 s of them, not after five (it took minutes).
  const auto give_up = std::chrono::steady_clock::now() + std::chrono::seconds(10);
  for (int attempt = 1;; ++attempt) {
    try {
      slurm_cancel(job.slurm_id, force, slurm_environment(job));
      break;
    } catch (const Error& e) {
      refresh_slurm_job(*m_store.get(job.id));
      if (auto now = m_store.get(job.id); now && is_terminal(now->state)) return now->state;
      if (attempt == 5 || std::chrono::steady_clock::now() >= give_up) {
        // The job's sbatch ran with the submitter's SLURM_CONF (kept with jobs since
        // 2026-11-29); a shell without it asks the default controller.
        if (slurm_environment(job).count("SLURM_CONF")) throw;
        throw Error(fmt::format("{} (SLURM_CONF is not set here: if the job was submitted with one, set it as it was)",
                                e.what()),
                    e.exit_code());
      }
      log::debug("{} (trying again)", e.what());
      std::this_thread::sleep_for(std::chrono::seconds(1));
    }
  }
  // Slurm signals the job (SIGTERM, then SIGKILL after its KillWait): wait for its word.
  auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(120);
  while (std::chrono::steady_clock::now() < deadline) {
    refresh_slurm_job(*m_store.get(job.id));
    auto now = m_store.get(job.id);
    if (is_terminal(now->state)) return now->state;
    std::this_thread::sleep_for(std::chrono::milliseconds(200));
  }
  m_store.finish(job.id, JobState::cancelled, std::nullopt, "scancel sent; Slurm had not ended the job after 120 s");
  return JobState::cancelled;
}

Capacity JobQueue::capacity() const {
  Capacity capacity;
  GpuInventory gpus = discover_gpus();
  capacity.gpus = gpus.count;
  if (capacity.gpus > 0) capacity.gpus_elsewhere = gpus_elsewhere();
  capacity.cpu_slots = cpu_slots();
  return capacity;
}

int JobQueue::cpu_slots() const {
  try {
    if (auto n = read_queue_settings(m_home).cpu_slots) return *n;
  } catch (const ConfigError&) {
    // A mistake in the file: dlrun submit refuses it and dlrun status says it; a supervisor
    // counts as if the file did not say (a job that waits is not failed for it).
  }
  if (auto it = m_env.find(env::k_cpu_slots); it != m_env.end()) {
    auto n = parse_int(it->second);
    if (!n || *n < 1) throw ConfigError(fmt::format("{}={}: expected a number of CPU slots (1 or more)", env::k_cpu_slots, it->second));
    return *n;
  }
  return usable_cores();
}

GpuClaimsByGpu JobQueue::claims_elsewhere() const {
  if (!gpu_claims_dir(m_env)) return {};
  if (!m_gpu_keys) m_gpu_keys = GpuKeys::here();
  return gpu_claims_elsewhere(m_env, *m_gpu_keys);
}

std::vector<GpuWantHolder> JobQueue::gpu_wants_elsewhere() const { return launcher::gpu_wants_elsewhere(m_env); }

int JobQueue::capacity_beside_others(int total, int least_here, double starvation_seconds,
                                     const std::vector<GpuWantHolder>& wants) const {
  const auto claims = claims_elsewhere();
  MachineShareInput in;
  in.total = total;
  in.least_here = least_here;
  std::set<std::pair<uid_t, std::string>> stores;
  for (const auto& [id, holders] : claims) {
    if (auto n = parse_int(id); n && *n >= 0 && *n < total) ++in.held_elsewhere;
    for (const auto& holder : holders) stores.insert({holder.uid, holder.home});
  }
  const double now = now_seconds();
  for (const auto& want : wants) {
    stores.insert({want.holder.uid, want.holder.home});
    in.waiting.push_back({want.gpus, want.holder.since > 0 && now - want.holder.since >= starvation_seconds});
  }
  in.stores = 1 + static_cast<int>(stores.size());
  return launcher::capacity_beside_others(in);
}

std::map<std::string, std::string> JobQueue::gpus_elsewhere() const {
  std::map<std::string, std::string> held;
  for (const auto& [id, holders] : claims_elsewhere()) held[id] = describe(holders);
  return held;
}

std::vector<std::string> JobQueue::gpu_ids_elsewhere() const {
  std::vector<std::string> ids;
  for (const auto& [id, holders] : claims_elsewhere()) ids.push_back(id);
  return ids;
}

namespace {
// What relative paths in a job file are relative to: its directory; for one that is no file
// (a pipe, <(…), /dev/stdin) the directory it is submitted from (the job ran in /proc/PID/fd).
std::string job_file_dir(const std::string& job_file) {
  struct stat st {};
  if (::stat(job_file.c_str(), &st) == 0 && !S_ISREG(st.st_mode)) return fs::current_path().string();
  return fs::absolute(fs::path(job_file)).parent_path().string();
}
}  // namespace

JobSpec JobQueue::read_job_file(const std::string& job_file, const std::string& kind, std::string& text) {
  std::error_code probe;
  if (std::filesystem::is_directory(job_file, probe)) {
    std::string dir = job_file;
    while (dir.size() > 1 && dir.back() == '/') dir.pop_back();
    throw ConfigError(fmt::format("{} is a directory: give its job file (e.g. {}/job.toml)", job_file,
                                  dir == "/" ? "" : dir));
  }
  std::ifstream file(job_file);
  if (!file) throw ConfigError(fmt::format("cannot read job file {}: {}", job_file, std::strerror(errno)));
  // A byte past the limit is enough for parse_job_spec to refuse it: /dev/zero is not read whole.
  text.resize(k_max_job_file_bytes + 1);
  file.read(text.data(), static_cast<std::streamsize>(text.size()));
  text.resize(static_cast<size_t>(file.gcount()));
  JobSpec spec = parse_job_spec(text, job_file, job_file_dir(job_file), kind);
  std::error_code ec;
  if (!spec.on_slurm() && !fs::is_directory(spec.workdir, ec)) {
    throw ConfigError(fmt::format("{}: workdir {} is not a directory", job_file, spec.workdir));
  }
  // Resolve the program as the job will: in its workdir, with its PATH. On other hosts
  // (kinds "ssh" and "slurm") that cannot be checked from here.
  Environment job_env = m_env;
  for (const auto& [key, value] : spec.env) job_env[key] = value;
  try {
    if (spec.scheduler == "local") resolve_command(spec.command, job_env["PATH"], spec.workdir);
  } catch (const ConfigError& e) {
    throw ConfigError(fmt::format("{}: {}", job_file, e.what()));
  }
  return spec;
}

SbatchInput JobQueue::sbatch_input(const JobSpec& spec, const std::string& id) const {
  std::string run = fmt::format("{}/jobs/{}", m_home, id);
  std::string logs = spec.log_dir.empty() ? run : fmt::format("{}/{}", spec.log_dir, id);
  return {self_executable(), id, run, logs, launcher::checkpoint_dir_of(spec, id, run)};
}

std::string JobQueue::log_dir(int64_t id, const JobSpec& spec) const {
  return spec.log_dir.empty() ? run_dir(id) : fmt::format("{}/{}", spec.log_dir, id);
}

std::string JobQueue::log_dir(const JobRecord& job) const {
  if (job.submitted.origin != JobOrigin::submit) return job.run_dir;
  try {
    return log_dir(job.id, submitted_spec(job));
  } catch (const ConfigError&) {
    return run_dir(job.id);
  }
}

void JobQueue::keep_result(int64_t id, const std::string& run_dir) {
  if (auto result = read_job_result(run_dir)) m_store.set_result(id, *result);
}

std::string JobQueue::checkpoint_dir_of(const JobRecord& job) {
  const Environment env = decode_environment(job.submitted.environment);
  if (auto it = env.find(env::k_resumed_checkpoint_dir); it != env.end() && !it->second.empty()) return it->second;
  return launcher::checkpoint_dir_of(submitted_spec(job), std::to_string(job.id),
                                     job.run_dir.empty() ? run_dir(job.id) : job.run_dir);
}

int64_t JobQueue::resubmit(const std::string& job_ref, const std::string& name, int64_t* resumed) {
  if (!name.empty()) check_job_name(name);
  // A job whose supervisor died reads RUNNING until a sweep: put right first.
  sweep(false);
  const JobRef ref = parse_job_ref(job_ref);
  const int64_t old_id = job_number(m_store, ref, "resume", NamedJob::newest);
  const auto old = m_store.get(old_id);
  if (!old) throw ConfigError(fmt::format("--resume {}: no such job", job_ref));
  check_owner(*old, "resume");
  if (old->submitted.origin != JobOrigin::submit) {
    throw ConfigError(fmt::format("--resume {}: job {} was started by dlrun {}, not dlrun submit (dlrun {} --resume {})",
                                  job_ref, old_id, to_string(old->submitted.origin),
                                  to_string(old->submitted.origin), old_id));
  }
  if (!is_terminal(old->state)) {
    throw ConfigError(fmt::format("--resume {}: job {} is {}: it has not ended (dlrun cancel {} stops it)", job_ref,
                                  old_id, to_string(old->state), old_id));
  }
  if (old->submitted.slurm) {
    throw ConfigError(fmt::format("--resume {}: job {} ran on Slurm: submit its job file again (its checkpoint_dir "
                                  "is where its ranks saved)",
                                  job_ref, old_id));
  }
  const std::string checkpoints = checkpoint_dir_of(*old);
  // A second --resume of one job (a retried CI step, a double submit) would train on from the
  // same checkpoints as the first: each would overwrite the other's and skip or repeat steps.
  if (const auto other = live_job_with_checkpoint_dir(checkpoints)) {
    throw ConfigError(fmt::format("--resume {}: job {} ({}, {}) uses job {}'s checkpoint directory ({}) already: two "
                                  "jobs on one checkpoint directory overwrite each other's. Wait for it (dlrun wait {}) "
                                  "and resume that one, or stop it first (dlrun cancel {})",
                                  job_ref, other->id, other->name, to_string(other->state), old_id, checkpoints,
                                  other->id, other->id));
  }
  std::error_code ec;
  if (!fs::is_directory(checkpoints, ec)) {
    log::warn("job {} left no checkpoint directory ({}): the new job starts from the beginning", old_id, checkpoints);
  }
  // The file may have been fixed since (the reason to resume): the job runs the text it was
  // submitted with, which is what --resume means, but the user should know.
  if (std::ifstream file(old->submitted.spec_path); file && fs::is_regular_file(old->submitted.spec_path, ec)) {
    std::string now((std::istreambuf_iterator<char>(file)), std::istreambuf_iterator<char>());
    if (now != old->submitted.spec_text) {
      log::warn("{} has changed since job {} was submitted: the resumed job runs it as it was then. To train on "
                "from these checkpoints with the file as it is now, set checkpoint_dir = \"{}\" in it and submit it",
                old->submitted.spec_path, old_id, checkpoints);
    }
  }
  NewJob job = old->submitted;
  if (!name.empty()) job.name = name;
  Environment stored = decode_environment(job.environment);
  stored[env::k_resumed_checkpoint_dir] = checkpoints;
  const auto before = stored.find(env::k_resumed_jobs);
  stored[env::k_resumed_jobs] =
      (before != stored.end() && !before->second.empty() ? before->second + "," : std::string()) + std::to_string(old_id);
  job.environment = encode_environment(stored);
  if (auto why = never_fits(job.request, capacity()); !why.empty()) {
    throw ConfigError(fmt::format("--resume {}: job '{}' can never run here: it {}", job_ref, job.name, why));
  }
  if (resumed) *resumed = old_id;
  return start_supervised(job);
}

std::optional<JobRecord> JobQueue::live_job_with_checkpoint_dir(const std::string& dir) {
  for (const auto& listed : m_store.list(false, 0)) {
    if (is_terminal(listed.state) || listed.submitted.origin != JobOrigin::submit) continue;
    auto job = m_store.get(listed.id);
    if (!job) continue;
    try {
      if (checkpoint_dir_of(*job) == dir) return job;
    } catch (const Error&) {
      // a job file this dlrun does not read: its own supervisor says so
    }
  }
  return std::nullopt;
}

void JobQueue::warn_of_shared_checkpoint_dir(const JobSpec& spec) {
  if (spec.checkpoint_dir.empty() || spec.checkpoint_dir.find("{job_id}") != std::string::npos) return;
  try {
    if (const auto job = live_job_with_checkpoint_dir(spec.checkpoint_dir)) {
      log::warn("checkpoint_dir {} is job {}'s ({}, {}) too: the two go on from each other's checkpoints. Where "
                "that is not meant, give each job its own: checkpoint_dir = \"…/{{job_id}}\" (docs/job-toml.md)",
                spec.checkpoint_dir, job->id, job->name, to_string(job->state));
    }
  } catch (const StoreUnavailable&) {
    // Submitting says so when it writes.
  }
}

JobSpec submitted_spec(const JobRecord& job) {
  // `dlrun submit --scheduler KIND` is not in the file: what the job asks for tells it.
  const char* kind = job.submitted.slurm ? "slurm" : job.submitted.request.remote ? "ssh" : "local";
  // A ~ in its directories is its submitter's HOME, whoever reads the job again.
  const Environment submitter = decode_environment(job.submitted.environment);
  const auto home = submitter.find("HOME");
  return parse_job_spec(job.submitted.spec_text, job.submitted.spec_path, job.submitted.base_dir, kind, true,
                        home == submitter.end() ? std::nullopt : std::optional<std::string>(home->second));
}

std::string JobQueue::sbatch_script(const std::string& job_file, const std::string& kind) {
  std::string text;
  JobSpec spec = read_job_file(job_file, kind, text);
  if (!spec.on_slurm()) {
    throw ConfigError(fmt::format("{}: --dry-run shows the sbatch script of a Slurm job; this one is kind \"{}\" "
                                  "(use --scheduler slurm or [scheduler] kind = \"slurm\")",
                                  job_file, spec.scheduler));
  }
  return render_sbatch_script(spec, sbatch_input(spec, "ID"));
}

int64_t JobQueue::submit(const std::string& job_file, const std::string& kind, const std::string& name,
                         bool check_only) {
  if (!name.empty()) check_job_name(name);
  std::string text;
  JobSpec spec = read_job_file(job_file, kind, text);
  if (!name.empty()) spec.name = name;
  // The scheduler and the clean-up read config.toml in the background, where a mistake would
  // hold a goodput job (and the fifo jobs behind it) without a word to its submitter.
  read_scheduler_settings(m_home);
  read_retention_settings(m_home);
  const QueueSettings queue_settings = read_queue_settings(m_home);
  if (auto it = m_env.find(env::k_cpu_slots); it != m_env.end() && queue_settings.cpu_slots &&
                                              it->second != std::to_string(*queue_settings.cpu_slots)) {
    log::warn("{}={} is not what this store counts: {}/config.toml's [queue] cpu_slots = {} is, for every job",
              env::k_cpu_slots, it->second, m_home, *queue_settings.cpu_slots);
  }
  NewJob job;
  job.name = spec.name;
  job.spec_text = text;
  job.spec_path = fs::absolute(fs::path(job_file)).string();
  job.base_dir = job_file_dir(job_file);
  Environment stored = job_environment(m_env, spec.export_env);
  if (const auto left = variables_left_behind(spec.command, m_env, stored, spec.env); !left.empty()) {
    std::vector<std::string> quoted;
    for (const auto& name : left) quoted.push_back("\"" + name + "\"");
    log::warn("{}: the command uses ${}, which this shell sets but a submitted job does not get (it keeps only the "
              "paths, locale and the variables docs/job-toml.md lists): export_env = [{}] in the job file passes "
              "{}, or set {} in its [env]",
              job_file, fmt::join(left, ", $"), fmt::join(quoted, ", "), left.size() == 1 ? "it" : "them",
              left.size() == 1 ? "it" : "them");
  }
  stored[env::k_umask] = started_umask_text();
  // Which Slurm the job went to: a later dlrun wait, status or cancel from a shell without it
  // asked no controller (and waited for good).
  if (auto conf = m_env.find("SLURM_CONF"); conf != m_env.end() && spec.on_slurm()) stored[conf->first] = conf->second;
  job.environment = encode_environment(stored);
  job.slurm = spec.on_slurm();
  job.owner_uid = static_cast<int>(::geteuid());
  try {
    job.request = request_of(spec);
  } catch (const ConfigError& e) {
    throw ConfigError(fmt::format("{}: {}", job_file, e.what()));
  }
  if (auto why = never_fits(job.request, capacity()); !why.empty()) {
    throw ConfigError(fmt::format("{}: job '{}' can never run here: it {}", job_file, spec.name, why));
  }
  warn_of_shared_checkpoint_dir(spec);
  if (check_only) return 0;
  if (!job.slurm) return start_supervised(job);  // the supervisor records it
  int64_t id = m_store.submit(job);
  submit_to_slurm(id, spec);
  return id;
}

void JobQueue::submit_to_slurm(int64_t id, const JobSpec& spec) {
  SbatchInput input = sbatch_input(spec, std::to_string(id));
  std::error_code ec;
  fs::create_directories(input.run_dir, ec);
  fs::create_directories(input.log_dir, ec);  // Slurm writes output.log there, and makes no directory
  std::string script_path = input.run_dir + "/job.sbatch";
  try {
    std::ofstream script(script_path);
    script << render_sbatch_script(spec, input);
    script.close();
    if (!script) throw Error(fmt::format("cannot write {}", script_path));
    int64_t slurm_id = slurm_submit(script_path, sbatch_environment(m_env, spec.export_env));
    if (!m_store.set_slurm_id(id, slurm_id, input.run_dir)) {
      // dlrun cancel came while sbatch ran: what it queued goes too.
      log::warn("job {} was cancelled while it was being submitted: cancelling Slurm job {}", id, slurm_id);
      try {
        slurm_cancel(slurm_id, false, m_env);
      } catch (const Error& e) {
        log::error("job {}: Slurm job {} is left queued: {} (scancel {} removes it)", id, slurm_id, e.what(), slurm_id);
      }
    }
  } catch (const Error& e) {
    m_store.finish(id, JobState::failed, e.exit_code(), fmt::format("not submitted to Slurm: {}", e.what()));
    throw;
  }
}

void JobQueue::refresh_slurm_jobs() {
  for (const auto& job : m_store.list(false, 0)) {
    if (job.submitted.slurm && job.slurm_id > 0 && !is_terminal(job.state)) refresh_slurm_job(job);
  }
}

void JobQueue::refresh_slurm_job(const JobRecord& job) {
  const SlurmAnswer answer = slurm_query(job.slurm_id, slurm_environment(job));
  if (!answer.info && !answer.gone) {
    // Slurm could not be asked (a controller restarting, scontrol missing from PATH): the job's
    // state stays as last seen. Ending it here made a live job FAILED for good, and `dlrun
    // clean` then removed the directory it was running in.
    if (m_unreachable_said.insert(job.slurm_id).second) {
      log::warn("cannot ask Slurm about job {} (Slurm job {}): {}; its state is as last seen", job.id, job.slurm_id,
                answer.why);
    }
    return;
  }
  std::optional<SlurmJobInfo> info = answer.info;
  if (!info) {
    // Slurm forgot it (MinJobAge, no accounting): the batch step's own record says how it ended.
    const auto record = job.run_dir.empty() ? std::nullopt : read_run_record(job.run_dir);
    if (record && record->exit_code && record->state != "running" && record->state != "rescaling") {
      std::string state = record->state;
      std::transform(state.begin(), state.end(), state.begin(), [](unsigned char c) { return std::toupper(c); });
      info = SlurmJobInfo{"", parse_job_state(state).value_or(JobState::failed), record->exit_code,
                          fmt::format("Slurm no longer knows job {}: how it ended is from {}/job.json", job.slurm_id,
                                      job.run_dir),
                          std::nullopt};
    } else {
      m_store.finish(job.id, JobState::failed, std::nullopt,
                     fmt::format("Slurm no longer knows job {} and has no accounting record of it, and its run "
                                 "directory says nothing of its end",
                                 job.slurm_id));
      return;
    }
  }
  if (info->state == JobState::pending && info->reason != job.reason) m_store.note_pending_reason(job.id, info->reason);
  if (info->state != JobState::pending && !job.run_dir.empty()) {
    // The batch step's supervisor counts its restarts in RUN_DIR/job.json (its store, if any, is
    // the compute node's): dlrun status said 0 after a restart.
    if (const auto record = read_run_record(job.run_dir);
        record && record->restarts > job.restarts + job.resizes + job.requested_restarts) {
      m_store.set_restarts(job.id, record->restarts - job.resizes - job.requested_restarts, job.resizes,
                           job.requested_restarts);
    }
  }
  if (info->state == JobState::running) m_store.mark_running(job.id, info->started_at);
  if (is_terminal(info->state)) {
    if (job.started_at <= 0) m_store.mark_running(job.id, info->started_at);
    // The batch step's supervisor says which rank failed and how, where Slurm says only
    // NonZeroExitCode (or JobLaunchFailure for a step killed once it had launched).
    std::optional<int> failed_rank;
    std::string reason = info->reason;
    if (const auto record = job.run_dir.empty() ? std::nullopt : read_run_record(job.run_dir);
        record && record->state != "running" && record->state != "rescaling") {
      failed_rank = record->failed_rank;
      const bool generic = reason.empty() || reason == "NonZeroExitCode" || reason == "JobLaunchFailure" ||
                           reason.rfind("Slurm: ", 0) == 0;
      if (generic && info->state == JobState::failed && !record->reason.empty()) reason = record->reason;
    }
    m_store.finish(job.id, info->state, info->exit_code, reason, {failed_rank, read_job_metrics(job.run_dir), std::nullopt});
  }
}

std::string JobQueue::spawn_detached(const std::vector<std::string>& args, const std::string& environment_blob,
                                     const std::string* job_bytes) {
  std::string exe = self_executable();
  Environment env = decode_environment(environment_blob);
  env.erase(env::k_supervisor_id);  // a store from before job_environment() dropped it
  // A job stored before DLRUN_UMASK was: its ranks get this process's user's umask, not the
  // 077 that keeps dlrun's own files private.
  env.emplace(env::k_umask, started_umask_text());
  std::vector<std::string> env_strings;
  for (const auto& [k, v] : env) env_strings.push_back(k + "=" + v);
  std::vector<char*> envp;
  for (auto& s : env_strings) envp.push_back(s.data());
  envp.push_back(nullptr);
  std::vector<std::string> words = {"dlrun"};
  words.insert(words.end(), args.begin(), args.end());
  std::vector<char*> argv;
  for (auto& w : words) argv.push_back(w.data());
  argv.push_back(nullptr);
  // With a job: its bytes go in on stdin, its id comes back on stdout.
  int in[2] = {-1, -1}, out[2] = {-1, -1};
  auto close_pipes = [&] {
    for (int* fd : {&in[0], &in[1], &out[0], &out[1]}) {
      if (*fd >= 0) ::close(*fd);
      *fd = -1;
    }
  };
  if (job_bytes && (::pipe2(in, O_CLOEXEC) != 0 || ::pipe2(out, O_CLOEXEC) != 0)) {
    int e = errno;
    close_pipes();
    throw SpawnError(fmt::format("cannot start dlrun {}: pipe: {}", args.front(), std::strerror(e)));
  }
  pid_t child = ::fork();
  if (child < 0) {
    int e = errno;
    close_pipes();
    throw SpawnError(fmt::format("cannot start dlrun {}: fork: {}", args.front(), std::strerror(e)));
  }
  if (child == 0) {
    // Double fork: the supervisor is nobody's child and leads its own session, so neither
    // the submitting shell's exit nor its Ctrl-C reaches it.
    ::setsid();
    if (::fork() != 0) ::_exit(0);
    int null_fd = ::open("/dev/null", O_RDWR);
    ::dup2(job_bytes ? in[0] : null_fd, 0);
    ::dup2(job_bytes ? out[1] : null_fd, 1);
    ::dup2(null_fd, 2);
    for (int fd = 3; fd < 1024; ++fd) ::close(fd);
    sigset_t none;
    sigemptyset(&none);
    ::sigprocmask(SIG_SETMASK, &none, nullptr);
    ::execve(exe.c_str(), argv.data(), envp.data());
    ::_exit(127);
  }
  std::string answer;
  if (job_bytes) {
    ::close(in[0]);
    ::close(out[1]);
    write_all(in[1], *job_bytes);  // a supervisor gone early answers nothing: said below
    ::close(in[1]);
    answer = read_all(out[0]);
    ::close(out[0]);
  }
  int status;
  while (::waitpid(child, &status, 0) < 0 && errno == EINTR) {
  }
  return answer;
}

void JobQueue::start_supervisor(int64_t id, const std::string& environment_blob) {
  spawn_detached({"_supervise", std::to_string(id)}, environment_blob, nullptr);
}

int64_t JobQueue::start_supervised(const NewJob& job) {
  const std::string bytes = encode_new_job(job);
  std::string answer = spawn_detached({"_supervise", "--new"}, job.environment, &bytes);
  auto id = parse_int(trim(answer));
  if (!id) {
    const std::string said(trim(answer));
    constexpr std::string_view k_unavailable = "unavailable: ";
    if (said.rfind(k_unavailable, 0) == 0) {
      throw StoreUnavailable(fmt::format("nothing was submitted: {}", said.substr(k_unavailable.size())));
    }
    constexpr std::string_view k_error = "error: ";
    throw SpawnError(fmt::format("the job's supervisor did not record it{}",
                                 said.empty() ? std::string()
                                              : ": " + (said.rfind(k_error, 0) == 0 ? said.substr(k_error.size()) : said)));
  }
  return *id;
}

int64_t record_new_job(const Environment& env, std::string_view bytes, std::ostream& answer) {
  auto job = decode_new_job(bytes);
  if (!job) {
    answer << "error: an incomplete job (was dlrun submit killed?)\n";
    return 0;
  }
  try {
    JobQueue queue(env);
    int64_t id = queue.store().submit(*job, ProcessIdentity::self());
    answer << id << "\n";
    return id;
  } catch (const StoreUnavailable& e) {
    answer << "unavailable: " << e.what() << "\n";  // submit says it as "try again" (75)
    return 0;
  } catch (const Error& e) {
    answer << "error: " << e.what() << "\n";
    return 0;
  }
}

namespace {
// When the job's supervisor last said it was alive: job.json's time, which it sets every 10 s
// while the job runs (Supervisor::keep_alive_mark).
std::optional<double> last_alive_mark(const std::string& dir) {
  struct stat st;
  if (::lstat((dir + "/job.json").c_str(), &st) != 0 || !S_ISREG(st.st_mode)) return std::nullopt;
  return static_cast<double>(st.st_mtim.tv_sec) + st.st_mtim.tv_nsec / 1e9;
}

// A lost job's end: the latest of its supervisor's mark and its logs' last writes (a job that
// died 7 s in, between two marks, read "FAILED after 0:00").
std::optional<double> last_sign_of_life(const std::string& dir) {
  std::optional<double> last = last_alive_mark(dir);
  std::error_code ec;
  for (auto it = fs::directory_iterator(dir, ec); !ec && it != fs::directory_iterator(); it.increment(ec)) {
    const std::string name = it->path().filename().string();
    const bool log = name == "output.log" || (name.rfind("rank-", 0) == 0 && name.size() > 9 &&
                                             name.compare(name.size() - 4, 4, ".log") == 0);
    struct stat st;
    if (!log || ::lstat(it->path().c_str(), &st) != 0 || !S_ISREG(st.st_mode)) continue;
    const double at = static_cast<double>(st.st_mtim.tv_sec) + st.st_mtim.tv_nsec / 1e9;
    if (!last || at > *last) last = at;
  }
  return last;
}
}  // namespace

int JobQueue::sweep(bool ask_slurm) {
  if (ask_slurm) refresh_slurm_jobs();
  Orphans orphans;
  try {
    // A supervisor that could not write the store at its job's end (a full disk) said how it
    // ended in the run directory: that, not "lost" (a job whose ranks all succeeded read FAILED).
    orphans = m_store.sweep(3.0, [](const JobRecord& job) -> std::optional<JobStore::RecordedEnd> {
      if (job.run_dir.empty()) return std::nullopt;
      const auto record = read_run_record(job.run_dir);
      if (!record || !record->exit_code) return std::nullopt;
      std::string upper = record->state;
      for (char& c : upper) c = static_cast<char>(std::toupper(static_cast<unsigned char>(c)));
      const auto state = parse_job_state(upper);
      if (!state || !is_terminal(*state)) return std::nullopt;
      // job.json was last written at the end.
      return JobStore::RecordedEnd{*state, *record->exit_code, record->reason, record->failed_rank,
                                   last_alive_mark(job.run_dir)};
    });
  } catch (const StoreUnavailable& e) {
    // Putting the store right waits for a later command; this one goes on with what it reads
    // (dlrun status under a lock held past the busy timeout failed with 70).
    if (!m_sweep_said) log::warn("{} (jobs whose supervisor died are put right later)", e.what());
    m_sweep_said = true;
    return 0;
  }
  for (int64_t id : orphans.ended_unrecorded) {
    auto job = m_store.get(id);
    const std::string dir = job && !job->run_dir.empty() ? job->run_dir : run_dir(id);
    if (auto metrics = read_job_metrics(dir); !metrics.empty()) m_store.set_final_metrics(id, metrics);
    keep_result(id, dir);
  }
  for (int64_t id : orphans.marked_lost) {
    // What its runtime last measured, as the supervisor would have kept it.
    auto job = m_store.get(id);
    const std::string dir = job && !job->run_dir.empty() ? job->run_dir : run_dir(id);
    if (auto metrics = read_job_metrics(dir); !metrics.empty()) m_store.set_final_metrics(id, metrics);
    keep_result(id, dir);
    // Its end is within 10 s of its supervisor's last sign of life: the sweep that noticed may
    // come hours later (after a reboot), and its elapsed time read so.
    if (auto last = last_sign_of_life(dir)) m_store.set_lost_end(id, *last);
  }
  for (int64_t id : orphans.pending_without_supervisor) {
    auto job = m_store.get(id);
    if (job) start_supervisor(id, job->submitted.environment);
  }
  // Not the goodput scheduler: a job's supervisor starts it, with the environment the job was
  // submitted with (a `dlrun status` from another shell would give it that shell's: another
  // LD_LIBRARY_PATH for NVML, no DLRUN_FAKE_GPUS, and it would see other GPUs than the job).
  return orphans.pending;
}

void JobQueue::ensure_scheduler() {
  if (!m_store.has_active_goodput_jobs() || m_store.scheduler_lease_holder()) return;
  try {
    spawn_detached({"_schedule"}, encode_environment(m_env), nullptr);
  } catch (const Error& e) {
    log::warn("{} (the goodput scheduler; the next dlrun command tries again)", e.what());
  }
}

void JobQueue::maybe_start_retention() {
  if (!retention_due(m_home)) return;
  mark_retention_started(m_home);
  try {
    read_retention_settings(m_home);
  } catch (const ConfigError& e) {
    log::warn("{}: old run directories are not cleaned until it is fixed (dlrun clean --dry-run checks it)", e.what());
    return;
  }
  try {
    spawn_detached({"clean", "--auto"}, encode_environment(m_env), nullptr);
  } catch (const Error& e) {
    log::warn("{} (the daily clean of old run directories)", e.what());
  }
}

int JobQueue::wait(int64_t id, const sigset_t* interrupt, std::optional<double> timeout_seconds) {
  using Clock = std::chrono::steady_clock;
  const auto deadline =
      timeout_seconds ? Clock::now() + std::chrono::duration_cast<Clock::duration>(std::chrono::duration<double>(*timeout_seconds))
                      : Clock::time_point::max();
  auto delay = std::chrono::milliseconds(20);
  int sweeps = 0;
  bool store_said = false;
  bool never_said = false;
  while (true) {
    // A store that cannot be read or written for a while (locked, a full disk) is waited out:
    // the job goes on, and so does the wait (it ended with 70 while the job succeeded).
    try {
      auto job = m_store.get(id);
      if (!job) throw ConfigError(fmt::format("no job {}", id));
      if (is_terminal(job->state)) return 0;
      if (Clock::now() >= deadline) return k_timed_out;
      if (job->submitted.slurm && job->slurm_id > 0) {
        refresh_slurm_job(*job);
        // Said once, as dlrun status says it: a wait with nothing printed read as a hang.
        if (auto now = m_store.get(id); now && now->state == JobState::pending && !never_said) {
          if (const std::string never = slurm_never_hint(now->reason); !never.empty()) {
            log::warn("job {} (Slurm job {}) waits for {}: {}, so it will not start as it is (dlrun cancel {}, and "
                      "submit what the partition allows)",
                      id, now->slurm_id, now->reason, never, id);
            never_said = true;
          }
        }
      }
      if (++sweeps % 25 == 0) sweep(false);  // the job waited for is asked about above
      store_said = false;
    } catch (const StoreUnavailable& e) {
      if (Clock::now() >= deadline) return k_timed_out;
      if (!store_said) log::warn("{}; waiting for job {} goes on", e.what(), id);
      store_said = true;
    }
    if (interrupt) {
      const auto ns = std::chrono::duration_cast<std::chrono::nanoseconds>(delay).count();
      timespec timeout{static_cast<time_t>(ns / 1000000000), static_cast<long>(ns % 1000000000)};
      if (int sig = ::sigtimedwait(interrupt, nullptr, &timeout); sig > 0) return sig;
    } else {
      std::this_thread::sleep_for(delay);
    }
    delay = std::min(delay * 2, std::chrono::milliseconds(200));
  }
}

void check_owner(const JobRecord& job, std::string_view what) {
  const uid_t me = ::geteuid();
  const int owner = job.submitted.owner_uid;
  if (me == 0 || owner < 0 || static_cast<uid_t>(owner) == me) return;
  throw ConfigError(fmt::format("job {} is user {}'s: only they (or root) may {} it", job.id, owner, what));
}

void JobQueue::send_signal(int64_t id, int signal) {
  auto job = m_store.get(id);
  if (!job) throw ConfigError(fmt::format("no job {} (dlrun status --all lists every job)", id));
  check_owner(*job, "signal");
  if (job->submitted.slurm && !is_terminal(job->state)) {  // its state here may be behind Slurm's
    refresh_slurm_job(*job);
    job = m_store.get(id);
  }
  if (job->state == JobState::rescaling) {
    throw Error(fmt::format("job {} is changing its size: its ranks are stopping or starting; try again in a "
                            "moment", id),
                exit_code::k_temp_failure);
  }
  if (job->state != JobState::running) {
    throw Error(fmt::format("job {} is {}: only a running job's ranks can be signalled", id, to_string(job->state)),
                1);
  }
  if (job->submitted.slurm) return slurm_signal(job->slurm_id, signal, slurm_environment(*job));
  const ProcessIdentity supervisor = job->supervisor;
  if (!supervisor.alive() || ::kill(supervisor.pid, signal) != 0) {
    throw Error(fmt::format("job {}: cannot signal its supervisor (pid {}): {}", id, supervisor.pid,
                            supervisor.alive() ? std::strerror(errno) : "it is not running"),
                1);
  }
}

JobState JobQueue::cancel(int64_t id, bool force, const std::string& why) {
  auto begun = begin_cancel(id, force, why);
  if (auto* state = std::get_if<JobState>(&begun)) return *state;
  return finish_cancel(std::get<CancelUnderWay>(begun));
}

std::variant<JobState, JobQueue::CancelUnderWay> JobQueue::begin_cancel(int64_t id, bool force, const std::string& why) {
  auto job = m_store.get(id);
  if (!job) throw ConfigError(fmt::format("no job {} (dlrun status --all lists every job)", id));
  if (is_terminal(job->state)) return job->state;
  check_owner(*job, "cancel");
  if (job->submitted.slurm) {
    // Its sbatch has not answered yet: the job leaves the queue here, and its submitter cancels
    // what sbatch queued (set_slurm_id). Once it has an id, Slurm cancels it.
    if (job->slurm_id == 0 && m_store.cancel_unsubmitted(id, why, exit_code::k_signal_base + SIGTERM)) {
      return JobState::cancelled;
    }
    return cancel_slurm(*m_store.get(id), force);
  }
  if (job->state == JobState::pending && m_store.cancel_pending(id, why, exit_code::k_signal_base + SIGTERM)) {
    return JobState::cancelled;
  }
  job = m_store.get(id);
  if (is_terminal(job->state)) return job->state;
  // A foreground run (dlrun local, dlrun run) keeps its grace with its command line; a
  // submitted job's file is read as it was submitted (`--scheduler local` for a file that
  // says kind = "slurm" made the file unreadable here, and the job uncancellable).
  double grace = JobSpec{}.grace;
  try {
    grace = job->submitted.origin == JobOrigin::submit ? submitted_spec(*job).grace
                                                       : decode_foreground_grace(job->submitted.spec_text);
  } catch (const ConfigError& e) {
    log::warn("job {}: its grace period cannot be read ({}): cancelling it with {} s", id, e.what(), grace);
  }
  CancelUnderWay cancel{id, force, why, grace, job->supervisor, {}};
  write_cancel_note(job->run_dir, why.rfind("by ", 0) == 0 ? why.substr(3) : why, cancel.supervisor.pid);
  signal_cancelled_supervisor(cancel, force ? SIGKILL : SIGTERM);
  cancel.deadline = std::chrono::steady_clock::now() + std::chrono::duration_cast<std::chrono::steady_clock::duration>(
                                                            std::chrono::duration<double>(force ? 5.0 : grace + 5.0));
  return cancel;
}

// What could not be done is said (exit 1), and the job's state is left as it is: its ranks
// may run, so its slots are not handed on.
Error JobQueue::not_stopped(int64_t id, const std::string& why) {
  auto job = m_store.get(id);
  return Error(fmt::format("job {}: {}; the job is left {}", id, why, job ? to_string(job->state) : "as it was"), 1);
}

void JobQueue::signal_cancelled_supervisor(const CancelUnderWay& cancel, int sig) {
  const ProcessIdentity& supervisor = cancel.supervisor;
  if (supervisor.alive() && ::kill(supervisor.pid, sig) != 0 && errno != ESRCH) {
    throw not_stopped(cancel.id,
                      fmt::format("cannot signal its supervisor (pid {}): {}", supervisor.pid, std::strerror(errno)));
  }
}

JobState JobQueue::finish_cancel(const CancelUnderWay& cancel) {
  const int64_t id = cancel.id;
  const ProcessIdentity& supervisor = cancel.supervisor;
  const bool force = cancel.force;
  const std::string& why = cancel.why;
  std::optional<JobRecord> job;
  while (std::chrono::steady_clock::now() < cancel.deadline) {
    job = m_store.get(id);
    if (is_terminal(job->state)) return job->state;  // the supervisor stopped the ranks and said how
    if (!supervisor.alive()) break;
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
  if (supervisor.alive() && processes_with_token(supervisor_token(supervisor)).empty()) {
    // Its ranks have ended; the supervisor waits for the store to take the job's end (locked, a
    // full disk): killing it lost that end (a job that succeeded read FAILED, lost).
    throw Error(fmt::format("job {}: its ranks have ended, and its supervisor (pid {}) waits to record how (the job "
                            "store cannot be written now); dlrun status {} says it once the store can be written",
                            id, supervisor.pid, id),
                exit_code::k_temp_failure);
  }
  if (supervisor.alive()) {
    log::warn("job {} did not stop within {} s: killing it", id, cancel.grace + 5.0);
    signal_cancelled_supervisor(cancel, SIGKILL);  // its orphan guard then kills the ranks' process groups
    for (int i = 0; i < 250 && supervisor.alive(); ++i) std::this_thread::sleep_for(std::chrono::milliseconds(20));
    if (supervisor.alive()) {
      throw not_stopped(id, fmt::format("its supervisor (pid {}) is still alive after SIGKILL", supervisor.pid));
    }
  }
  // The supervisor is gone without a word: its guard kills the ranks. Whatever still carries
  // its token is killed here, and the job is CANCELLED only once nothing of it runs.
  const std::string token = supervisor_token(supervisor);
  kill_processes_with_token(token);
  // A killed process keeps its /proc entry until it is reaped, longer when the kernel is
  // tearing down a device: give it a few seconds.
  auto left = processes_with_token(token);
  for (int i = 0; i < 250 && !left.empty(); ++i) {
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
    kill_processes_with_token(token, 1);
    left = processes_with_token(token);
  }
  if (!left.empty()) {
    throw not_stopped(id, fmt::format("{} of its processes (pid {}) could not be stopped", left.size(), left.front()));
  }
  m_store.finish(id, JobState::cancelled, exit_code::k_signal_base + SIGKILL,
                 force ? why + " --force (killed)" : why + " (killed: it did not stop in time)");
  return m_store.get(id)->state;
}

}  // namespace dlrun::launcher
