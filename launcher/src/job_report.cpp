#include "dlrun/launcher/job_report.hpp"

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <ctime>
#include <filesystem>

#include <fmt/format.h>
#include <fmt/ranges.h>
#include <nlohmann/json.hpp>

#include "dlrun/error.hpp"
#include "dlrun/launcher/foreground_job.hpp"
#include "dlrun/launcher/job_environment.hpp"
#include "dlrun/launcher/job_result.hpp"
#include "dlrun/launcher/pending_reason.hpp"
#include "dlrun/launcher/ssh.hpp"
#include "dlrun/launcher/text.hpp"

#include "dlrun/launcher/time_stamp.hpp"

namespace dlrun::launcher {
namespace {

double elapsed(const JobRecord& job, double now) {
  if (job.started_at <= 0) return 0;
  return (job.ended_at > 0 ? job.ended_at : now) - job.started_at;
}

// "4", or "1:8" for an elastic request.
std::string requested_ranks(const JobRecord& job) {
  const auto& r = job.submitted.request;
  return r.min_ranks == r.max_ranks ? std::to_string(r.max_ranks) : fmt::format("{}:{}", r.min_ranks, r.max_ranks);
}

std::string gpus_of(const JobRecord& job) {
  if (!job.submitted.request.uses_gpus) return "-";
  std::string ids;
  for (const auto& id : job.allocation.gpu_ids) ids += (ids.empty() ? "" : ",") + id;
  if (!ids.empty()) return ids;
  // What a waiting job asks for (those GPUs, when it names them; else how many, an elastic
  // one's range: it starts on the least); one that ended without starting held none.
  if (is_terminal(job.state)) return "-";
  // Named GPUs say so: "(1)" read as one GPU, and "(2)" as GPU 2.
  if (!job.submitted.request.gpu_ids.empty()) {
    return fmt::format("(GPU{} {})", job.submitted.request.gpu_ids.size() == 1 ? "" : "s",
                       fmt::join(job.submitted.request.gpu_ids, ","));
  }
  return fmt::format("({})", requested_ranks(job));
}

std::string ranks_of(const JobRecord& job) {
  return job.allocation.ranks > 0 ? std::to_string(job.allocation.ranks) : requested_ranks(job);
}

// Every restart but a resize: after a failure, and those the ranks asked for (exit 75).
std::string restarts_text(const JobRecord& job) {
  const int all = job.restarts + job.requested_restarts;
  if (job.requested_restarts == 0) return std::to_string(all);
  if (job.restarts == 0) return fmt::format("{} (asked for by the ranks)", all);
  return fmt::format("{} ({} after a failure, {} asked for by the ranks)", all, job.restarts, job.requested_restarts);
}

std::string number_text(std::optional<double> v) {
  if (!v) return "-";
  if (std::fabs(*v - std::round(*v)) < 1e-9) return fmt::format("{:.0f}", *v);
  return fmt::format("{:.1f}", *v);
}

std::string iso_time(double seconds) {
  if (seconds <= 0) return "";
  return utc_iso8601(static_cast<std::time_t>(seconds));
}

const PolicyView* policy_of(const QueueInsight& insight, const JobRecord& job) {
  auto it = insight.policy.find(job.id);
  return it == insight.policy.end() ? nullptr : &it->second;
}

// Why a pending job waits; why an ended one failed or was cancelled.
const std::string& reason_of(const QueueInsight& insight, const JobRecord& job) {
  if (job.state == JobState::pending) {
    if (auto it = insight.waiting.find(job.id); it != insight.waiting.end()) return it->second;
  }
  return job.reason;
}

std::string exit_text(const JobRecord& job) { return job.exit_code ? std::to_string(*job.exit_code) : "-"; }

// What `dlrun resize JOB N` pinned a goodput job at (the scheduler keeps it there); 0: none.
int pinned_of(const JobRecord& job) {
  return job.submitted.request.goodput && !is_terminal(job.state) ? std::max(0, job.pinned) : 0;
}

// "4 (1.8x)": GPUs and the predicted speedup over the fair share; without a published model
// only the GPUs (the neutral prediction says nothing of the job); "4 (pinned)" for a pin.
std::string policy_text(const PolicyView* view, const JobRecord& job) {
  if (const int pin = pinned_of(job)) return fmt::format("{} (pinned)", pin);
  if (!view) return "-";
  if (!view->modelled) return std::to_string(view->gpus);
  return fmt::format("{} ({:.1f}x)", view->gpus, view->speedup);
}

// A running job's from its metrics.jsonl; an ended one's as it ended (kept in the store).
// What the job said it achieved: kept with an ended job, read from its run directory while it runs.
std::optional<std::string> result_of(const JobRecord& job) {
  if (is_terminal(job.state) || job.state == JobState::pending) return job.result;
  return read_job_result(job.run_dir);
}

MetricsSnapshot metrics_of(const JobRecord& job) {
  if (is_terminal(job.state)) return job.final_metrics;
  if (job.state == JobState::pending) return {};
  return read_job_metrics(job.run_dir);
}

}  // namespace

std::string format_duration(double seconds) {
  long s = std::lround(std::max(0.0, seconds));
  long days = s / 86400, hours = s / 3600 % 24, minutes = s / 60 % 60, secs = s % 60;
  if (days > 0) return fmt::format("{}-{:02}:{:02}:{:02}", days, hours, minutes, secs);
  if (hours > 0) return fmt::format("{}:{:02}:{:02}", hours, minutes, secs);
  return fmt::format("{}:{:02}", minutes, secs);
}

std::string render_table(const std::vector<std::vector<std::string>>& rows, const std::vector<size_t>& min_widths) {
  std::vector<size_t> widths = min_widths;
  for (const auto& row : rows) {
    if (widths.size() < row.size()) widths.resize(row.size(), 0);
    for (size_t i = 0; i < row.size(); ++i) widths[i] = std::max(widths[i], row[i].size());
  }
  std::string out;
  for (const auto& row : rows) {
    std::string line;
    for (size_t i = 0; i < row.size(); ++i) {
      line += row[i];
      if (i + 1 < row.size()) line += std::string(widths[i] - row[i].size() + 2, ' ');
    }
    out += line + "\n";
  }
  return out;
}

// A table keeps one line per job: a reason of several lines (sbatch's stderr) shows its first,
// and `dlrun status JOB` the whole.
static std::string one_line(const std::string& text) {
  const size_t end = text.find('\n');
  return end == std::string::npos ? text : text.substr(0, end) + " …";
}

std::vector<std::vector<std::string>> status_rows(const std::vector<JobRecord>& jobs, double now,
                                                  const QueueInsight& insight) {
  std::vector<std::vector<std::string>> rows = {{"ID", "NAME", "STATE", "EXIT", "RANKS", "GPUS", "RESTARTS", "RESIZES",
                                                 "SUBMITTED", "ELAPSED", "BATCH", "SAMPLES/S", "POLICY", "REASON"}};
  rows.reserve(jobs.size() + 1);
  for (const auto& job : jobs) {
    auto metrics = metrics_of(job);
    const std::string& reason = reason_of(insight, job);
    rows.push_back({std::to_string(job.id), job.name, to_string(job.state), exit_text(job), ranks_of(job), gpus_of(job),
                    std::to_string(job.restarts + job.requested_restarts), std::to_string(job.resizes),
                    job.submitted_at > 0 ? local_iso8601(static_cast<std::time_t>(job.submitted_at)) : "-",
                    job.started_at > 0 ? format_duration(elapsed(job, now)) : "-", number_text(metrics.global_batch),
                    number_text(metrics.samples_per_sec), policy_text(policy_of(insight, job), job),
                    reason.empty() ? "-" : one_line(reason)});
  }
  return rows;
}

std::string status_table(const std::vector<JobRecord>& jobs, double now, const QueueInsight& insight) {
  // Room for the values that change as jobs run ("RESCALING", "10:02:03", "12 (1.8x)"), so
  // that `--watch` and watch(1) redraw the columns in place.
  static const std::vector<size_t> min_widths = {0, 0, 9, 4, 5, 7, 8, 7, 19, 8, 6, 9, 9, 0};
  std::string text = render_table(status_rows(jobs, now, insight), min_widths);
  // GPUs this queue cannot use, and why: another user's dlrun holds them.
  const auto elsewhere = gpus_held_elsewhere_text(insight.gpus_elsewhere);
  if (!elsewhere.empty()) text += "\nOutside this queue: " + fmt::format("{}", fmt::join(elsewhere, "; ")) + "\n";
  return text;
}

namespace {

// The command that started the job: `dlrun submit FILE`, or a foreground run's command line.
std::string started_by(const JobRecord& job) {
  if (job.submitted.origin == JobOrigin::submit) {
    // A resumed job (dlrun submit --resume): the job it goes on from, the last of the chain.
    const Environment env = decode_environment(job.submitted.environment);
    const auto resumed = env.find(env::k_resumed_jobs);
    if (resumed == env.end() || resumed->second.empty()) return "dlrun submit " + job.submitted.spec_path;
    const auto comma = resumed->second.rfind(',');
    const std::string from = comma == std::string::npos ? resumed->second : resumed->second.substr(comma + 1);
    const auto dir = env.find(env::k_resumed_checkpoint_dir);
    return fmt::format("dlrun submit --resume {}  (job file {}; on from the checkpoints in {})", from,
                       job.submitted.spec_path, dir == env.end() ? "?" : dir->second);
  }
  std::string text = job.submitted.origin == JobOrigin::run ? "dlrun run" : "dlrun local";
  try {
    for (const auto& word : decode_foreground_words(job.submitted.spec_text)) text += " " + shell_quote(word);
  } catch (const ConfigError&) {
  }
  if (!job.submitted.base_dir.empty()) text += "  (in " + job.submitted.base_dir + ")";
  return text;
}

}  // namespace

std::string status_details(const JobRecord& job, double now, const QueueInsight& insight) {
  const PolicyView* view = policy_of(insight, job);
  const std::string& reason = reason_of(insight, job);
  auto metrics = metrics_of(job);
  std::vector<std::vector<std::string>> rows = {
      {"id:", std::to_string(job.id)},
      {"name:", job.name},
      {"state:", to_string(job.state)},
      {"exit code:", exit_text(job)},
      {"reason:", reason.empty() ? "-" : reason},
      {"ranks:", ranks_of(job)},
      {"gpus:", gpus_of(job)},
      {"restarts:", restarts_text(job)},
      {"resizes:", std::to_string(job.resizes)},
      {"failed rank:", job.failed_rank ? std::to_string(*job.failed_rank) : "-"},
      {"submitted:", iso_time(job.submitted_at)},
      {"started:", job.started_at > 0 ? iso_time(job.started_at) : "-"},
      {"ended:", job.ended_at > 0 ? iso_time(job.ended_at) : "-"},
      {"elapsed:", job.started_at > 0 ? format_duration(elapsed(job, now)) : "-"},
      {"batch size:", number_text(metrics.global_batch)},
      {"samples/s:", number_text(metrics.samples_per_sec)},
      {"goodput:", number_text(metrics.goodput)},
      {"noise scale:", number_text(metrics.noise_scale)},
      {"result:", result_of(job).value_or("-")},
      {"policy:", pinned_of(job) ? fmt::format("pinned at {} by dlrun resize (dlrun resize {} auto hands "
                                               "it back to the scheduler)",
                                               counted(job.pinned, "GPU"), job.id)
                  : !view ? "-"
                  : view->modelled
                      ? fmt::format("{}, predicted speedup {:.2f}x over the fair share (published model)",
                                    counted(view->gpus, "GPU"), view->speedup)
                      : fmt::format("{} (no published model yet: neutral prediction)", counted(view->gpus, "GPU"))},
      {"started by:", started_by(job)},
      {"slurm job:", job.slurm_id > 0 ? std::to_string(job.slurm_id) : "-"},
      {"run dir:", job.run_dir.empty()                ? "-"
                   : std::filesystem::exists(job.run_dir) ? job.run_dir
                                                          : job.run_dir + " (removed: dlrun clean, or retention)"},
  };
  return render_table(rows);
}

namespace {

// Keys in the documented order (docs/jobs.md), appended to the object's storage directly:
// they are known to be distinct, and `dlrun status --all --json` writes 10,000 objects.
nlohmann::ordered_json job_object(const JobRecord& job, double now, const QueueInsight& insight) {
  const PolicyView* view = policy_of(insight, job);
  using Json = nlohmann::ordered_json;
  auto metrics = metrics_of(job);
  auto number_or_null = [](std::optional<double> v) { return v ? Json(*v) : Json(); };
  auto time_or_null = [](double t) { return t > 0 ? Json(iso_time(t)) : Json(); };
  Json gpus = Json::array();
  for (const auto& id : job.allocation.gpu_ids) {
    auto index = parse_int(id);  // GPU indices as numbers; a UUID stays a string
    gpus.push_back(index ? Json(*index) : Json(id));
  }
  Json out = Json::object();
  auto& fields = out.get_ref<Json::object_t&>();
  fields.reserve(29);  // every key below: no reallocation (10,000 objects for status --all --json)
  auto add = [&fields](const char* key, Json value) {
    fields.Json::object_t::Container::emplace_back(key, std::move(value));
  };
  add("id", job.id);
  add("name", job.name);
  add("state", to_string(job.state));
  add("exit_code", job.exit_code ? Json(*job.exit_code) : Json());
  add("reason", reason_of(insight, job));
  add("failed_rank", job.failed_rank ? Json(*job.failed_rank) : Json());
  add("ranks", job.allocation.ranks > 0 ? Json(job.allocation.ranks) : Json());
  add("gpus", std::move(gpus));
  add("min_ranks", job.submitted.request.min_ranks);
  add("max_ranks", job.submitted.request.max_ranks);
  add("restarts", job.restarts);
  add("resizes", job.resizes);
  add("requested_restarts", job.requested_restarts);
  add("submitted_at", iso_time(job.submitted_at));
  add("started_at", time_or_null(job.started_at));
  add("ended_at", time_or_null(job.ended_at));
  // null for a job that never started, as the table's "-" (0 read as "started, 0 s ago").
  add("elapsed_seconds", job.started_at > 0 ? Json(std::round(elapsed(job, now) * 1000) / 1000) : Json());
  // A batch is a count of samples: 64, not 64.0 (which a script's string compare took for another).
  add("global_batch", metrics.global_batch ? Json(static_cast<int64_t>(std::llround(*metrics.global_batch))) : Json());
  add("samples_per_sec", number_or_null(metrics.samples_per_sec));
  add("goodput", number_or_null(metrics.goodput));
  add("noise_scale", number_or_null(metrics.noise_scale));
  {
    const auto result = result_of(job);
    add("result", result ? Json::parse(*result, nullptr, false) : Json());
  }
  add("run_dir", job.run_dir);
  add("job_file", job.submitted.spec_path);
  add("origin", to_string(job.submitted.origin));
  add("slurm_id", job.slurm_id > 0 ? Json(job.slurm_id) : Json());
  add("policy_gpus", view ? Json(view->gpus) : Json());
  add("predicted_speedup", view && view->modelled ? Json(std::round(view->speedup * 1000) / 1000) : Json());
  add("pinned", pinned_of(job) ? Json(pinned_of(job)) : Json());
  // How it is started and sized here; null for a job whose ranks run elsewhere (Slurm, ssh).
  const bool here = !job.submitted.slurm && !job.submitted.request.remote;
  add("policy", here ? Json(job.submitted.request.goodput ? "goodput" : "fifo") : Json());
  add("owner_uid", job.submitted.owner_uid >= 0 ? Json(job.submitted.owner_uid) : Json());
  return out;
}

}  // namespace

// A name, path or reason need not be UTF-8: such bytes are written as U+FFFD.
std::string dump(const nlohmann::ordered_json& json) {
  return json.dump(-1, ' ', false, nlohmann::ordered_json::error_handler_t::replace);
}

std::string job_json(const JobRecord& job, double now, const QueueInsight& insight) {
  return dump(job_object(job, now, insight));
}

std::string jobs_json(const std::vector<JobRecord>& jobs, double now, const QueueInsight& insight) {
  // One object per line, for people reading it too. One serializer writes them all into `out`
  // (what dump() does for one value, without a serializer and a string per job).
  using Json = nlohmann::ordered_json;
  std::string out = "[";
  out.reserve(jobs.size() * 512 + 2);
  nlohmann::detail::serializer<Json> writer(nlohmann::detail::output_adapter<char, std::string>(out), ' ',
                                            Json::error_handler_t::replace);
  for (size_t i = 0; i < jobs.size(); ++i) {
    if (i) out += ",\n ";
    writer.dump(job_object(jobs[i], now, insight), /*pretty_print=*/false,
                /*ensure_ascii=*/false, 0);
  }
  return out + "]";
}

int status_exit_code(JobState state) {
  switch (state) {
    case JobState::succeeded: return 0;
    case JobState::failed: return 1;
    case JobState::cancelled: return 3;
    case JobState::pending: return 4;
    case JobState::running:
    case JobState::rescaling: return 5;
  }
  return 1;
}

}  // namespace dlrun::launcher
