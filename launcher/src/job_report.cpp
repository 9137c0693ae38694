#include "dlrun/launcher/job_report.hpp"

#include <cmath>
#include <cstdlib>
#include <ctime>
#include <fstream>

#include <fmt/format.h>

#include "dlrun/launcher/run_dir.hpp"

namespace dlrun::launcher {
namespace {

double elapsed(const JobRecord& job, double now) {
  if (job.started_at <= 0) return 0;
  return (job.ended_at > 0 ? job.ended_at : now) - job.started_at;
}

std::string gpus_of(const JobRecord& job) {
  if (!job.submitted.request.uses_gpus) return "-";
  std::string ids;
  for (const auto& id : job.allocation.gpu_ids) ids += (ids.empty() ? "" : ",") + id;
  return ids.empty() ? fmt::format("({})", job.submitted.request.max_ranks) : ids;
}

std::string ranks_of(const JobRecord& job) {
  if (job.allocation.ranks > 0) return std::to_string(job.allocation.ranks);
  const auto& r = job.submitted.request;
  return r.min_ranks == r.max_ranks ? std::to_string(r.max_ranks) : fmt::format("{}:{}", r.min_ranks, r.max_ranks);
}

std::string number_text(std::optional<double> v) {
  if (!v) return "-";
  if (std::fabs(*v - std::round(*v)) < 1e-9) return fmt::format("{:.0f}", *v);
  return fmt::format("{:.1f}", *v);
}

std::string iso_time(double seconds) {
  if (seconds <= 0) return "";
  std::time_t t = static_cast<std::time_t>(seconds);
  std::tm utc{};
  ::gmtime_r(&t, &utc);
  char text[32];
  std::strftime(text, sizeof text, "%Y-%m-%dT%H:%M:%SZ", &utc);
  return text;
}

MetricsSnapshot metrics_if_running(const JobRecord& job) {
  if (job.state != JobState::running && job.state != JobState::rescaling) return {};
  return read_latest_metrics(job.run_dir);
}

}  // namespace

std::string format_duration(double seconds) {
  long s = std::lround(std::max(0.0, seconds));
  long days = s / 86400, hours = s / 3600 % 24, minutes = s / 60 % 60, secs = s % 60;
  if (days > 0) return fmt::format("{}-{:02}:{:02}:{:02}", days, hours, minutes, secs);
  if (hours > 0) return fmt::format("{}:{:02}:{:02}", hours, minutes, secs);
  return fmt::format("{}:{:02}", minutes, secs);
}

std::string render_table(const std::vector<std::vector<std::string>>& rows) {
  std::vector<size_t> widths;
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

std::optional<double> number_field(std::string_view line, std::string_view key) {
  std::string needle = fmt::format("\"{}\"", key);
  size_t at = line.find(needle);
  if (at == std::string_view::npos) return std::nullopt;
  at = line.find_first_not_of(" \t", at + needle.size());
  if (at == std::string_view::npos || line[at] != ':') return std::nullopt;
  std::string rest(line.substr(at + 1));
  const char* begin = rest.c_str();
  char* end = nullptr;
  double value = std::strtod(begin, &end);
  if (end == begin) return std::nullopt;
  return value;
}

MetricsSnapshot parse_metrics_line(std::string_view line) {
  return {number_field(line, "global_batch"), number_field(line, "samples_per_sec"),
          number_field(line, "step"), number_field(line, "goodput"), number_field(line, "noise_scale")};
}

MetricsSnapshot read_latest_metrics(const std::string& run_dir) {
  std::ifstream file(run_dir + "/metrics.jsonl", std::ios::binary | std::ios::ate);
  if (!file) return {};
  std::streamoff size = file.tellg();
  std::streamoff start = std::max<std::streamoff>(0, size - 8192);
  file.seekg(start);
  std::string tail(static_cast<size_t>(size - start), '\0');
  file.read(tail.data(), static_cast<std::streamsize>(tail.size()));
  // The last line may be half-written: use the last one that ends in '\n'.
  size_t end = tail.rfind('\n');
  if (end == std::string::npos) return {};
  size_t begin = tail.rfind('\n', end == 0 ? 0 : end - 1);
  begin = begin == std::string::npos || begin == end ? 0 : begin + 1;
  return parse_metrics_line(std::string_view(tail).substr(begin, end - begin));
}

std::vector<std::vector<std::string>> status_rows(const std::vector<JobRecord>& jobs, double now) {
  std::vector<std::vector<std::string>> rows = {
      {"ID", "NAME", "STATE", "RANKS", "GPUS", "RESTARTS", "ELAPSED", "BATCH", "SAMPLES/S"}};
  for (const auto& job : jobs) {
    auto metrics = metrics_if_running(job);
    rows.push_back({std::to_string(job.id), job.name, to_string(job.state), ranks_of(job), gpus_of(job),
                    std::to_string(job.restarts), job.started_at > 0 ? format_duration(elapsed(job, now)) : "-",
                    number_text(metrics.global_batch), number_text(metrics.samples_per_sec)});
  }
  return rows;
}

std::string status_details(const JobRecord& job, double now) {
  auto metrics = metrics_if_running(job);
  std::vector<std::vector<std::string>> rows = {
      {"id:", std::to_string(job.id)},
      {"name:", job.name},
      {"state:", to_string(job.state)},
      {"exit code:", job.exit_code ? std::to_string(*job.exit_code) : "-"},
      {"reason:", job.reason.empty() ? "-" : job.reason},
      {"ranks:", ranks_of(job)},
      {"gpus:", gpus_of(job)},
      {"restarts:", std::to_string(job.restarts)},
      {"submitted:", iso_time(job.submitted_at)},
      {"started:", job.started_at > 0 ? iso_time(job.started_at) : "-"},
      {"ended:", job.ended_at > 0 ? iso_time(job.ended_at) : "-"},
      {"elapsed:", job.started_at > 0 ? format_duration(elapsed(job, now)) : "-"},
      {"batch size:", number_text(metrics.global_batch)},
      {"samples/s:", number_text(metrics.samples_per_sec)},
      {"goodput:", number_text(metrics.goodput)},
      {"noise scale:", number_text(metrics.noise_scale)},
      {"job file:", job.submitted.spec_path},
      {"slurm job:", job.slurm_id > 0 ? std::to_string(job.slurm_id) : "-"},
      {"run dir:", job.run_dir.empty() ? "-" : job.run_dir},
  };
  return render_table(rows);
}

std::string job_json(const JobRecord& job, double now) {
  auto metrics = metrics_if_running(job);
  auto opt = [](std::optional<double> v) { return v ? fmt::format("{}", *v) : std::string("null"); };
  std::string gpus;
  for (const auto& id : job.allocation.gpu_ids) gpus += (gpus.empty() ? "" : ",") + id;
  return fmt::format(
      "{{\"id\": {}, \"name\": {}, \"state\": {}, \"exit_code\": {}, \"reason\": {}, \"ranks\": {}, "
      "\"gpus\": [{}], \"restarts\": {}, \"submitted_at\": {}, \"started_at\": {}, \"ended_at\": {}, "
      "\"elapsed_seconds\": {:.3f}, \"global_batch\": {}, \"samples_per_sec\": {}, \"goodput\": {}, "
      "\"noise_scale\": {}, \"run_dir\": {}, "
      "\"job_file\": {}, \"slurm_id\": {}}}",
      job.id, json_string(job.name), json_string(to_string(job.state)),
      job.exit_code ? std::to_string(*job.exit_code) : "null", json_string(job.reason), job.allocation.ranks,
      gpus, job.restarts, json_string(iso_time(job.submitted_at)),
      job.started_at > 0 ? json_string(iso_time(job.started_at)) : "null",
      job.ended_at > 0 ? json_string(iso_time(job.ended_at)) : "null", elapsed(job, now),
      opt(metrics.global_batch), opt(metrics.samples_per_sec), opt(metrics.goodput),
      opt(metrics.noise_scale), json_string(job.run_dir),
      json_string(job.submitted.spec_path), job.slurm_id > 0 ? std::to_string(job.slurm_id) : "null");
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
