#include "dlrun/launcher/foreground_job.hpp"
#include "dlrun/launcher/run_record.hpp"

#include <fmt/format.h>
#include <fmt/ranges.h>
#include <unistd.h>

#include <algorithm>
#include <cstring>
#include <filesystem>
#include <optional>
#include <nlohmann/json.hpp>

#include "dlrun/error.hpp"
#include "dlrun/launcher/gpu_claims.hpp"
#include "dlrun/launcher/job_metrics.hpp"
#include "dlrun/launcher/job_queue.hpp"
#include "dlrun/launcher/job_ref.hpp"
#include "dlrun/launcher/private_files.hpp"
#include "dlrun/launcher/run_dir.hpp"
#include "dlrun/launcher/text.hpp"
#include "dlrun/log.hpp"
#include "dlrun/protocol.hpp"

namespace fs = std::filesystem;

namespace dlrun::launcher {

struct ForegroundJob::Store {
  explicit Store(const Environment& env) : queue(env) {}
  JobQueue queue;
};

namespace {

constexpr const char* k_hex = "0123456789abcdef";

// A command line's word as JSON: its text, or where it is not UTF-8 (a Latin-1 path: Linux's
// arguments are bytes) {"hex": its bytes}, so that --resume runs it byte for byte.
nlohmann::json encode_word(const std::string& word) {
  nlohmann::json text = word;
  try {
    (void)text.dump();
    return text;
  } catch (const nlohmann::json::type_error&) {
    std::string hex;
    for (unsigned char c : word) {
      hex += k_hex[c >> 4];
      hex += k_hex[c & 15];
    }
    return nlohmann::json{{"hex", hex}};
  }
}

std::optional<std::string> decode_word(const nlohmann::json& word) {
  if (word.is_string()) return word.get<std::string>();
  if (!word.is_object() || !word.contains("hex") || !word["hex"].is_string()) return std::nullopt;
  const std::string hex = word["hex"].get<std::string>();
  if (hex.size() % 2 != 0) return std::nullopt;
  auto digit = [](char c) -> int {
    const char* at = std::strchr(k_hex, c);
    return c != '\0' && at ? static_cast<int>(at - k_hex) : -1;
  };
  std::string bytes;
  for (size_t i = 0; i < hex.size(); i += 2) {
    const int high = digit(hex[i]), low = digit(hex[i + 1]);
    if (high < 0 || low < 0) return std::nullopt;
    bytes += static_cast<char>(high * 16 + low);
  }
  return bytes;
}

}  // namespace

std::string encode_foreground_command(const std::vector<std::string>& words, double grace_seconds) {
  nlohmann::json line = nlohmann::json::array();
  for (const auto& word : words) line.push_back(encode_word(word));
  return nlohmann::json{{"command_line", line}, {"grace", grace_seconds}}.dump();
}

namespace {

nlohmann::json parse_foreground(const std::string& spec_text) {
  auto json = nlohmann::json::parse(spec_text, nullptr, false);
  if (!json.is_object() || !json.contains("command_line") || !json["command_line"].is_array()) {
    throw ConfigError("the job keeps no command line dlrun can read");
  }
  return json;
}

// `dir` is `outer` or lies inside it.
bool within(const fs::path& dir, const fs::path& outer) {
  auto [end, unused] = std::mismatch(outer.begin(), outer.end(), dir.begin(), dir.end());
  return end == outer.end();
}

// A run directory is one job's: two running in one resumed from each other's checkpoints and
// mixed their logs; and one that holds dlrun's own state would be removed with the job's
// (dlrun clean).
void check_run_dir(JobStore& store, const std::string& home, const std::string& run_dir, int64_t self) {
  const fs::path dir = plain_path(run_dir);
  const fs::path state = plain_path(home);
  if (within(state, dir) || dir == state / "runs") {
    throw ConfigError(fmt::format("--run-dir {}: it holds dlrun's own state ({}): give a directory of the run's own",
                                  run_dir, dir == state / "runs" ? (state / "runs").string() : state.string()));
  }
  for (const auto& job : store.list(false, 0)) {
    if (job.id == self || job.run_dir.empty() || is_terminal(job.state)) continue;
    const fs::path other = plain_path(job.run_dir);
    if (within(dir, other) || within(other, dir)) {
      throw ConfigError(fmt::format(
          "--run-dir {}: job {} ({}) is {} in {}: two runs in one directory would resume from each "
          "other's checkpoints and mix their logs",
          run_dir, job.id, job.name, to_string(job.state), other.string()));
    }
  }
}

// The newest complete checkpoint (a step-N directory with its MANIFEST) in RUN_DIR/checkpoints,
// the runtime's default place: what a resume starts from, when the program saves there.
std::optional<long long> newest_checkpoint(const std::string& run_dir) {
  std::optional<long long> newest;
  std::error_code ec;
  for (const auto& entry : fs::directory_iterator(fs::path(run_dir) / "checkpoints", ec)) {
    const std::string name = entry.path().filename().string();
    if (name.rfind("step-", 0) != 0 || !fs::exists(entry.path() / "MANIFEST", ec)) continue;
    try {
      const long long step = std::stoll(name.substr(5));
      if (!newest || step > *newest) newest = step;
    } catch (const std::exception&) {
      continue;  // not one of the runtime's
    }
  }
  return newest;
}

const char* verb_of(JobOrigin origin) {
  return origin == JobOrigin::run ? "run" : "local";
}

}  // namespace

std::vector<std::string> decode_foreground_words(const std::string& spec_text) {
  std::vector<std::string> words;
  const nlohmann::json json = parse_foreground(spec_text);
  for (const auto& word : json["command_line"]) {
    auto decoded = decode_word(word);
    if (!decoded) throw ConfigError("the job keeps no command line dlrun can read");
    words.push_back(std::move(*decoded));
  }
  return words;
}

double decode_foreground_grace(const std::string& spec_text) {
  auto json = parse_foreground(spec_text);
  return json.contains("grace") && json["grace"].is_number() ? json["grace"].get<double>() : 10.0;
}

std::string resume_hint(JobOrigin origin, const std::string& job_id) {
  return fmt::format("dlrun {} --resume {}", verb_of(origin), job_id);
}

ResumeTarget find_resume_target(const Environment& env, const std::string& text, JobOrigin origin) {
  JobQueue queue(env);
  // A job whose dlrun was killed outright reads RUNNING until a sweep finds its supervisor dead:
  // --resume said "it has not ended (dlrun cancel stops it)" of a job with no rank left.
  queue.sweep(false);
  const JobRef ref = parse_job_ref(text);
  std::optional<JobRecord> job =
      ref.number ? queue.store().get(*ref.number) : queue.store().find_by_name(text);
  if (!job) {
    throw ConfigError(fmt::format("--resume {}: no job {} (dlrun status --all lists every job)",
                                  text, ref.number ? "numbered " + text : "named '" + text + "'"));
  }
  check_owner(*job, "resume");
  if (job->submitted.origin != origin) {
    throw ConfigError(fmt::format(
        "--resume {}: job {} was started by {}, not dlrun {}{}", text, job->id,
        job->submitted.origin == JobOrigin::submit
            ? "dlrun submit"
            : fmt::format("dlrun {}", verb_of(job->submitted.origin)),
        verb_of(origin),
        job->submitted.origin == JobOrigin::submit
            ? fmt::format(" (dlrun submit --resume {} queues it again, from its checkpoints)", job->id)
            : ""));
  }
  if (!is_terminal(job->state)) {
    throw ConfigError(
        fmt::format("--resume {}: job {} is {}: it has not ended (dlrun cancel {} stops it)", text,
                    job->id, to_string(job->state), job->id));
  }
  std::error_code ec;
  if (job->run_dir.empty() || !fs::is_directory(job->run_dir, ec)) {
    throw ConfigError(fmt::format(
        "--resume {}: job {}'s run directory {} is gone (removed by retention or by hand): "
        "nothing to resume from",
        text, job->id, job->run_dir.empty() ? "(none)" : job->run_dir));
  }
  ResumeTarget target;
  target.id = job->id;
  target.name = job->name;
  target.run_dir = job->run_dir;
  target.workdir = job->submitted.base_dir;
  target.words = decode_foreground_words(job->submitted.spec_text);
  target.ranks = job->allocation.ranks;
  return target;
}

ForegroundJob::ForegroundJob(const Environment& env, const ForegroundCommand& command,
                             std::optional<ResumeTarget> resume)
    : m_command(command), m_resume(std::move(resume)) {
  try {
    m_store = std::make_unique<Store>(env);
    if (m_resume) {
      m_number = m_resume->id;
    } else {
      NewJob job;
      job.name = command.name;
      job.spec_text = encode_foreground_command(command.words, command.grace_seconds);
      job.base_dir = command.workdir;
      job.request.uses_gpus = command.uses_gpus;
      job.request.remote = command.remote;
      job.owner_uid = static_cast<int>(::geteuid());
      job.origin = command.origin;
      m_number = m_store->queue.store().record_foreground(job, ProcessIdentity::self());
    }
    m_job_id = std::to_string(*m_number);
  } catch (const ForeignHomeError&) {
    throw;  // another user's store, or a group's: not a place to run from, recorded or not
  } catch (const Error& e) {
    if (m_resume) throw;  // a resume needs its record
    m_store.reset();
    m_job_id = make_job_id();
    log::warn(
        "this run is not recorded, so dlrun status, logs, cancel and resize do not know it ({}); "
        "its id "
        "is {}",
        e.what(), m_job_id);
  }
}

ForegroundJob::~ForegroundJob() {
  if (!m_store || m_ended) return;
  try {
    if (!m_started) {
      if (!m_resume) m_store->queue.store().forget(*m_number);
      return;
    }
    m_store->queue.store().finish(
        *m_number, JobState::failed, std::nullopt,
        fmt::format("dlrun {} ended with an error before its ranks did (see its output)",
                    verb_of(m_command.origin)));
  } catch (const std::exception& e) {
    log::warn("job {}: its end could not be recorded: {}", m_job_id, e.what());
  }
}

void ForegroundJob::record_error(const std::string& message, int code) {
  if (!m_store || m_ended || !m_started) return;
  try {
    m_store->queue.store().finish(*m_number, JobState::failed, code, message);
    m_ended = true;
  } catch (const std::exception& e) {
    log::warn("job {}: its end could not be recorded: {}", m_job_id, e.what());
  }
}

std::vector<std::string> ForegroundJob::gpus_held_elsewhere(const Environment& env) const {
  std::vector<std::string> held;
  if (m_store) {
    std::vector<int64_t> except = {*m_number};
    if (auto it = env.find(env::k_job_id); it != env.end()) {
      if (auto parent = parse_int(it->second)) except.push_back(*parent);
    }
    try {
      held = m_store->queue.store().gpus_held(except);
      // Jobs queued for GPUs wait behind a run started by hand: say so (it took GPUs ahead of
      // them, and the queue's users see only that they wait).
      std::vector<std::string> waiting;
      for (const auto& job : m_store->queue.store().list(false, 0)) {
        const auto& request = job.submitted.request;
        if (job.state != JobState::pending || !request.uses_gpus || request.remote || job.submitted.slurm) continue;
        waiting.push_back(fmt::format("{} ({})", job.id, job.name));
      }
      if (!waiting.empty()) {
        log::warn("{} wait{} in the queue for GPUs; this run takes what it uses ahead of {} (dlrun submit queues "
                  "a job behind them)",
                  waiting.size() == 1 ? "job " + waiting.front() : fmt::format("jobs {}", fmt::join(waiting, ", ")),
                  waiting.size() == 1 ? "s" : "", waiting.size() == 1 ? "it" : "them");
      }
    } catch (const Error& e) {
      log::warn("which GPUs other jobs hold is not known ({}): choosing among all", e.what());
    }
  }
  // And those the jobs of other stores hold: another user's, or another DLRUN_HOME's.
  for (const auto& [gpu, holders] : gpu_claims_elsewhere(env)) {
    if (std::find(held.begin(), held.end(), gpu) != held.end()) continue;
    log::info("GPU {} is in use by {}: not chosen", gpu, describe(holders));
    held.push_back(gpu);
  }
  return held;
}

void ForegroundJob::attach(Plan& plan) {
  if (!m_store) return;
  JobStore& store = m_store->queue.store();
  if (m_resume &&
      !store.reopen(*m_number, ProcessIdentity::self(),
                    encode_foreground_command(m_command.words, m_command.grace_seconds))) {
    throw ConfigError(fmt::format("--resume {}: job {} was taken up by another dlrun meanwhile",
                                  m_job_id, m_job_id));
  }
  if (!plan.run_dir.empty()) {
    try {
      check_run_dir(store, m_store->queue.home(), plan.run_dir, *m_number);
    } catch (const ConfigError&) {
      // Refused: the directory the plan made for it goes again (empty, it holds nothing), and
      // so does the link $DLRUN_HOME/runs/JOB the plan made to it.
      std::error_code ignored;
      if (plan.fresh_run_dir) fs::remove(plan.run_dir, ignored);
      const fs::path link = fs::path(m_store->queue.home()) / "runs" / plan.job_id;
      if (fs::is_symlink(link, ignored) && fs::read_symlink(link, ignored) == fs::path(plan.run_dir)) {
        fs::remove(link, ignored);
      }
      throw;
    }
  }
  m_started = true;
  // Its GPUs are held in the store before its ranks start on them.
  Allocation allocation;
  allocation.ranks = plan.global_world_size > 0 ? plan.global_world_size : plan.world_size;
  allocation.gpu_ids = plan.gpu_ids;
  store.set_foreground_start(*m_number, allocation, plan.run_dir, plan.min_world_size,
                             plan.max_world_size);
  const int64_t id = *m_number;
  // A resumed job's restarts so far: its record keeps counting them (dlrun status), and
  // DLRUN_RESTART_COUNT goes on from them (a resume is not a restart). Its --max-restarts
  // budget is this run's own.
  RestartCounts before;
  if (m_resume) {
    if (auto record = store.get(id)) {
      before = {record->restarts + record->resizes + record->requested_restarts, record->restarts, record->resizes,
                record->requested_restarts};
    }
  }
  plan.restarts_before = before.all;
  plan.on_restart = [&store, id, before](const RestartCounts& counts) {
    store.set_restarts(id, before.failures + counts.failures, before.resizes + counts.resizes,
                       before.requested + counts.requested);
  };
  // Its own supervisor resizes it, within the GPUs it started with: it keeps holding them all
  // (a shrunk job grows back onto them), while its rank count changes.
  const std::vector<std::string> held = plan.gpu_ids;
  plan.on_rescale = [&store, id, held](bool rescaling, int world_size, const std::vector<std::string>&) {
    if (!rescaling) store.set_allocation(id, {world_size, held}, "resize");
    store.set_rescaling(id, rescaling);
  };
  const std::string run_dir = plan.run_dir;
  const bool quiet = plan.options.quiet;
  plan.on_end = [this, run_dir, quiet](const RunEnd& end) {
    try {
      m_store->queue.keep_result(*m_number, run_dir);  // first: whoever sees it ended sees its result
      m_store->queue.store().finish(*m_number, state_after(end.exit_code, end.stop_signal != 0),
                                    end.exit_code, end.summary,
                                    {end.failed_rank, read_job_metrics(run_dir), std::nullopt});
      m_ended = true;
    } catch (const std::exception& e) {
      // Its run directory's job.json says how it ended: the next dlrun command that sweeps the
      // store (dlrun status) records that, not "lost".
      const auto kept = read_run_record(run_dir);
      if (kept && kept->exit_code) {
        log::warn("job {}: its end could not be recorded now: {} (the next dlrun status records it from {}/job.json)",
                  m_job_id, e.what(), run_dir);
      } else {
        log::warn("job {}: its end could not be recorded: {}; nor in {}/job.json: it will read as lost (exit code "
                  "{})",
                  m_job_id, e.what(), run_dir, end.exit_code);
      }
      m_ended = true;  // not "ended with an error before its ranks did" (the destructor's), a second time
    }
    if (end.exit_code != 0 && !quiet) {
      const auto step = newest_checkpoint(run_dir);
      log::info("job {} {}; '{}' runs it again in its run directory, {}", m_job_id,
                end.stop_signal ? "stopped" : "failed", resume_hint(m_command.origin, m_job_id),
                step ? fmt::format("from its checkpoint of step {}", *step)
                     : std::string("from its checkpoint if it saved one"));
    }
    m_store->queue.maybe_start_retention();
  };
}

}  // namespace dlrun::launcher
