// `dlrun resize JOB N`: change the rank count of a running elastic job.

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <memory>
#include <sstream>

#include <fmt/format.h>

#include "commands.hpp"
#include "dlrun/error.hpp"
#include "dlrun/launcher/job_queue.hpp"
#include "dlrun/launcher/job_report.hpp"
#include "dlrun/launcher/process.hpp"
#include "dlrun/launcher/resize.hpp"
#include "dlrun/launcher/run_dir.hpp"
#include "dlrun/launcher/text.hpp"

namespace dlrun::cli {
namespace {

constexpr double k_answer_timeout = 600;  // the ranks may take a while to checkpoint

struct ResizeArgs {
  std::string job;
  int ranks = 0;
};

std::string answer_or_throw(const std::string& answer, const std::string& job) {
  if (answer.rfind("error: ", 0) == 0) throw ConfigError(fmt::format("job {}: {}", job, answer.substr(7)));
  return answer;
}

// A job started with dlrun local: its run directory's job.json names its supervisor.
int resize_local_run(const std::string& job, int ranks, const launcher::Environment& env) {
  std::string run_dir = fmt::format("{}/runs/{}", launcher::dlrun_home(env), job);
  std::ifstream record(run_dir + "/job.json");
  if (!record) {
    throw ConfigError(fmt::format("no job {} (neither a submitted job nor a dlrun local run in {}/runs)", job,
                                  launcher::dlrun_home(env)));
  }
  std::stringstream text;
  text << record.rdbuf();
  std::string flat = text.str();
  std::replace(flat.begin(), flat.end(), '\n', ' ');
  auto pid = launcher::number_field(flat, "dlrun_pid");
  if (!pid || flat.find("\"state\": \"running\"") == std::string::npos) {
    throw ConfigError(fmt::format("job {} is not running", job));
  }
  answer_or_throw(launcher::request_resize(run_dir, static_cast<int>(*pid), {ranks, {}}, k_answer_timeout), job);
  std::cout << "Job " << job << " now runs " << ranks << (ranks == 1 ? " rank\n" : " ranks\n");
  return 0;
}

int resize_submitted(launcher::JobQueue& queue, int64_t id, int ranks) {
  auto job = queue.store().get(id);
  if (job->state != launcher::JobState::running) {
    throw ConfigError(fmt::format("job {} is {}, not RUNNING", id, launcher::to_string(job->state)));
  }
  const auto& request = job->submitted.request;
  if (auto why = launcher::check_resize(ranks, request.min_ranks, request.max_ranks); !why.empty()) {
    throw ConfigError(fmt::format("job {}: {}", id, why));
  }
  launcher::Allocation before = job->allocation;
  auto after = queue.store().resize_allocation(id, ranks, queue.capacity());
  if (!after) {
    throw ConfigError(fmt::format("job {}: not enough free {} for {} ranks now", id,
                                  request.uses_gpus ? "GPUs" : "CPU slots", ranks));
  }
  try {
    answer_or_throw(launcher::request_resize(job->run_dir, job->supervisor.pid, {ranks, after->gpu_ids},
                                             k_answer_timeout),
                    std::to_string(id));
  } catch (...) {
    queue.store().restore_allocation(id, before);
    throw;
  }
  std::cout << "Job " << id << " now runs " << ranks << (ranks == 1 ? " rank\n" : " ranks\n");
  return 0;
}

int run_resize(const ResizeArgs& args) {
  auto env = launcher::current_environment();
  if (args.ranks < 1) throw ConfigError(fmt::format("resize to {} ranks: must be at least 1", args.ranks));
  if (auto id = launcher::parse_int(args.job)) {
    launcher::JobQueue queue(env);
    if (queue.store().get(*id)) return resize_submitted(queue, *id, args.ranks);
  }
  return resize_local_run(args.job, args.ranks, env);
}

}  // namespace

Command add_resize_command(CLI::App& dlrun) {
  auto args = std::make_shared<ResizeArgs>();
  CLI::App* app = dlrun.add_subcommand(
      "resize",
      "Change the number of ranks of a running elastic job (started with MIN:MAX ranks): the ranks "
      "checkpoint, stop at the same step, and restart with the new count");
  app->add_option("JOB", args->job, "A submitted job's id, or the id dlrun local printed ('dlrun: job ID')")
      ->required();
  app->add_option("RANKS", args->ranks, "The new number of ranks, within the job's MIN:MAX")->required();
  return {app, [args](const Trailing&) { return run_resize(*args); }};
}

}  // namespace dlrun::cli
