// `dlrun logs JOB [--rank R] [-f]`: a job's output, all ranks prefixed or one rank's own.

#include <unistd.h>

#include <chrono>
#include <fstream>
#include <iostream>
#include <memory>
#include <thread>

#include <fmt/format.h>

#include "commands.hpp"
#include "dlrun/error.hpp"
#include "dlrun/launcher/job_queue.hpp"
#include "dlrun/launcher/process.hpp"
#include "dlrun/launcher/run_dir.hpp"

namespace dlrun::cli {
namespace {

struct LogsArgs {
  int64_t job = 0;
  int rank = -1;
  bool follow = false;
};

// Copies what `file` has beyond `offset` to stdout; returns the new offset.
std::streamoff copy_new(const std::string& path, std::streamoff offset) {
  std::ifstream file(path, std::ios::binary);
  if (!file) return offset;
  file.seekg(offset);
  char buffer[65536];
  while (file.read(buffer, sizeof buffer) || file.gcount() > 0) {
    std::cout.write(buffer, file.gcount());
    offset += file.gcount();
  }
  std::cout.flush();
  return offset;
}

int run_logs(const LogsArgs& args) {
  launcher::JobQueue queue(launcher::current_environment());
  auto job = queue.store().get(args.job);
  if (!job) throw ConfigError(fmt::format("no job {} (dlrun status --all lists every job)", args.job));
  std::string run_dir = queue.run_dir(args.job);
  std::string path = args.rank >= 0 ? launcher::rank_log_path(run_dir, args.rank) : run_dir + "/output.log";
  if (args.rank >= 0 && job->allocation.ranks > 0 && args.rank >= job->allocation.ranks) {
    throw ConfigError(fmt::format("--rank {}: job {} has ranks 0 to {}", args.rank, args.job, job->allocation.ranks - 1));
  }
  std::streamoff offset = copy_new(path, 0);
  if (!args.follow) return 0;
  int polls = 0;
  while (true) {
    job = queue.store().get(args.job);
    bool ended = launcher::is_terminal(job->state);
    offset = copy_new(path, offset);
    if (ended) return 0;
    std::this_thread::sleep_for(std::chrono::milliseconds(100));
    if (++polls % 10 == 0) queue.sweep();
  }
}

}  // namespace

Command add_logs_command(CLI::App& dlrun) {
  auto args = std::make_shared<LogsArgs>();
  CLI::App* app = dlrun.add_subcommand("logs", "Print a job's output: all ranks prefixed, or one rank's own log");
  app->add_option("JOB", args->job, "The job id")->required();
  app->add_option("--rank", args->rank, "Only this rank's output, as it wrote it")->type_name("R");
  app->add_flag("-f,--follow", args->follow, "Keep printing new output until the job ends");
  return {app, [args](const Trailing&) { return run_logs(*args); }};
}

}  // namespace dlrun::cli
