// --name and --resume of `dlrun local` and `dlrun run`: see foreground.hpp.

#include "foreground.hpp"

#include <fmt/format.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <filesystem>

#include "commands.hpp"
#include "dlrun/error.hpp"
#include "dlrun/launcher/command_resolution.hpp"
#include "dlrun/launcher/job_ref.hpp"
#include "dlrun/launcher/process.hpp"
#include "dlrun/launcher/run_dir.hpp"

namespace fs = std::filesystem;

namespace dlrun::cli {
namespace {

// dlrun's words after the verb, without --resume and its value: what the job keeps.
std::vector<std::string> kept_words() {
  const auto& all = invocation();
  std::vector<std::string> words;
  for (size_t i = 1; i < all.size(); ++i) {
    if (all[i] == "--") {  // the program's own words from here
      words.insert(words.end(), all.begin() + static_cast<long>(i), all.end());
      break;
    }
    if (all[i] == "--resume") {
      ++i;
      continue;
    }
    if (all[i].rfind("--resume=", 0) == 0) continue;
    words.push_back(all[i]);
  }
  return words;
}

// The program's name as a job name: train.py, not the python3 that runs it.
std::string default_name(const std::vector<std::string>& command) {
  if (command.empty()) return "job";
  const launcher::ShownProgram program = launcher::shown_program(command);
  return launcher::job_name_from(program.module ? program.word : fs::path(program.word).filename().string());
}

[[noreturn]] void run_again(const std::string& verb, const launcher::ResumeTarget& target) {
  if (!target.workdir.empty() && ::chdir(target.workdir.c_str()) != 0) {
    throw ConfigError(fmt::format("--resume {}: cannot enter its working directory {}: {}",
                                  target.id, target.workdir, std::strerror(errno)));
  }
  if (target.words.empty())
    throw ConfigError(fmt::format("--resume {}: the job keeps no command line", target.id));
  std::vector<std::string> words = {"dlrun", verb, "--resume", std::to_string(target.id)};
  words.insert(words.end(), target.words.begin(), target.words.end());
  std::vector<char*> argv;
  for (auto& word : words) argv.push_back(word.data());
  argv.push_back(nullptr);
  ::execv("/proc/self/exe", argv.data());
  throw SpawnError(
      fmt::format("--resume {}: cannot run dlrun again: {}", target.id, std::strerror(errno)));
}

}  // namespace

void add_foreground_options(CLI::App* app, ForegroundArgs& args) {
  app->add_option("--name", args.name,
                  "The job's name in dlrun status (default: the program's name); --resume takes it")
      ->type_name("NAME");
  app->add_option("--resume", args.resume,
                  "Take up the ended job JOB (its number, or its name) again, under its number and "
                  "in its run "
                  "directory, where its checkpoint is. Alone, it runs JOB's own command line "
                  "again; followed by a "
                  "command line, that one")
      ->type_name("JOB");
}

void run_again_if_resume_alone(const ForegroundArgs& args, const CLI::App& app,
                               launcher::JobOrigin origin, const launcher::PlanOptions& options) {
  if (args.resume.empty() || !options.command.empty()) return;
  auto target = launcher::find_resume_target(launcher::current_environment(), args.resume, origin);
  if (!kept_words().empty()) {
    throw ConfigError(
        fmt::format("--resume {} with options but no program: give the whole command line after "
                    "--resume {}, or nothing else to run the job's own again",
                    args.resume, args.resume));
  }
  run_again(app.get_name(), target);
}

std::unique_ptr<launcher::ForegroundJob> start_foreground(const ForegroundArgs& args,
                                                          const CLI::App& app,
                                                          launcher::JobOrigin origin,
                                                          launcher::PlanOptions& options,
                                                          bool uses_gpus) {
  const auto env = launcher::current_environment();
  if (!args.name.empty()) launcher::check_job_name(args.name);
  std::optional<launcher::ResumeTarget> resume;
  if (!args.resume.empty()) {
    run_again_if_resume_alone(args, app, origin, options);
    resume = launcher::find_resume_target(env, args.resume, origin);
    // A resumed job keeps its name and its run directory (its checkpoints are there): another
    // one given was ignored without a word.
    if (!args.name.empty() && args.name != resume->name) {
      throw ConfigError(fmt::format("--name {} with --resume: job {} keeps its name '{}'", args.name,
                                    resume->id, resume->name));
    }
    if (!options.run_dir.empty() && launcher::plain_path(options.run_dir) != launcher::plain_path(resume->run_dir)) {
      throw ConfigError(fmt::format("--run-dir {} with --resume: job {} resumes in its own run directory {}",
                                    options.run_dir, resume->id, resume->run_dir));
    }
    // The default run directory of the job's number is found again by it; another is named.
    const std::string home = launcher::dlrun_home(env);
    if (fs::path(resume->run_dir) != fs::path(home) / "runs" / std::to_string(resume->id))
      options.run_dir = resume->run_dir;
  }
  launcher::ForegroundCommand command;
  command.origin = origin;
  command.name = !args.name.empty() ? args.name
                 : resume           ? resume->name
                                    : default_name(options.command);
  command.words = kept_words();
  command.workdir = fs::current_path().string();
  command.grace_seconds = options.grace_seconds;
  command.uses_gpus = uses_gpus;
  command.remote = origin == launcher::JobOrigin::run;
  return std::make_unique<launcher::ForegroundJob>(env, command, std::move(resume));
}

}  // namespace dlrun::cli
