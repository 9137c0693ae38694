// --name and --resume of `dlrun local` and `dlrun run`: see foreground.hpp.

#include "foreground.hpp"

#include <fmt/format.h>
#include <unistd.h>

#include <sys/stat.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <filesystem>

#include "commands.hpp"
#include "dlrun/error.hpp"
#include "dlrun/launcher/command_resolution.hpp"
#include "dlrun/launcher/job_ref.hpp"
#include "dlrun/launcher/private_files.hpp"
#include "dlrun/launcher/process.hpp"
#include "dlrun/launcher/run_dir.hpp"

namespace fs = std::filesystem;

namespace dlrun::cli {
namespace {

// Marks dlrun run again by a bare --resume: the job keeps its own command line, not the
// display options given this time.
constexpr const char* k_resumed_alone = "--resumed-alone";

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
    if (all[i].rfind("--resume=", 0) == 0 || all[i] == k_resumed_alone) continue;
    words.push_back(all[i]);
  }
  return words;
}

// An option of dlrun's at the front of a command line, with its value if it takes one.
struct LeadingOption {
  const CLI::Option* option = nullptr;
  std::vector<std::string> words;
};

// dlrun's own options at the front of `words`, up to the program (the first word that is not
// one of `app`'s options or their values) or "--".
std::vector<LeadingOption> leading_options(const CLI::App& app, const std::vector<std::string>& words) {
  std::vector<LeadingOption> found;
  for (size_t i = 0; i < words.size(); ++i) {
    const std::string& word = words[i];
    if (word == "--" || word.size() < 2 || word[0] != '-') break;
    const size_t equals = word.find('=');
    const CLI::Option* option = app.get_option_no_throw(word.substr(0, equals));
    if (!option) break;
    LeadingOption given{option, {word}};
    if (equals == std::string::npos && option->get_items_expected_max() > 0 && i + 1 < words.size()) {
      given.words.push_back(words[++i]);
    }
    found.push_back(std::move(given));
  }
  return found;
}

// How a run is shown, not what it runs: these may come with a bare --resume.
bool shows_only(const CLI::Option* option) {
  for (const char* name : {"--quiet", "--no-prefix", "--prefix", "--ranks", "--color", "--tail"}) {
    if (option->check_name(name)) return true;
  }
  return false;
}

// Whether `given` now stands in for the job's own `kept`: the same option, or another of the
// same group, of which a command line has one: --prefix and --no-prefix, --nproc and --gpus
// (how many ranks), --hosts and --hostfile (where).
bool replaces(const CLI::Option* given, const CLI::Option* kept) {
  const auto in = [](const CLI::Option* option, std::initializer_list<const char*> names) {
    return std::any_of(names.begin(), names.end(), [option](const char* name) { return option->check_name(name); });
  };
  for (const auto& group : {std::initializer_list<const char*>{"--prefix", "--no-prefix"},
                            std::initializer_list<const char*>{"--nproc", "--gpus"},
                            std::initializer_list<const char*>{"--hosts", "--hostfile"}}) {
    if (in(given, group) && in(kept, group)) return true;
  }
  return given == kept;
}


// Runs dlrun again as `dlrun VERB --resume ID GIVEN WORDS`: the job's own words, from its
// working directory, with the options given now in place of those it had. Display options
// alone are for this one time (`for_now`: the job keeps its words); with any other (--nproc 4)
// the result is the job's command line from now on, as if it had been given whole.
[[noreturn]] void run_again(const std::string& verb, const launcher::ResumeTarget& target, const CLI::App& app,
                            const std::vector<LeadingOption>& shown, bool for_now) {
  if (!target.workdir.empty() && ::chdir(target.workdir.c_str()) != 0) {
    throw ConfigError(fmt::format("--resume {}: cannot enter its working directory {}: {}",
                                  target.id, target.workdir, std::strerror(errno)));
  }
  if (target.words.empty())
    throw ConfigError(fmt::format("--resume {}: the job keeps no command line", target.id));
  std::vector<std::string> words = {"dlrun", verb, "--resume", std::to_string(target.id)};
  if (for_now) words.push_back(k_resumed_alone);
  for (const auto& given : shown) words.insert(words.end(), given.words.begin(), given.words.end());
  size_t skip = 0;
  for (const auto& kept : leading_options(app, target.words)) {
    const bool replaced = std::any_of(shown.begin(), shown.end(),
                                      [&](const LeadingOption& given) { return replaces(given.option, kept.option); });
    if (!replaced) words.insert(words.end(), kept.words.begin(), kept.words.end());
    skip += kept.words.size();
  }
  words.insert(words.end(), target.words.begin() + static_cast<long>(skip), target.words.end());
  std::vector<char*> argv;
  for (auto& word : words) argv.push_back(word.data());
  argv.push_back(nullptr);
  // The ranks get the umask this dlrun was started with (this process keeps its own files
  // private meanwhile, and the dlrun started here would take that one for the user's).
  ::umask(launcher::started_umask());
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
                  "again; with options and no program (--resume 12 --nproc 4), that command line with "
                  "those options in place of its own; followed by a command line, that one")
      ->type_name("JOB");
  app->add_flag(k_resumed_alone, args.resumed_alone)->group("");  // dlrun's own, see run_again
}

void run_again_if_resume_alone(const ForegroundArgs& args, const CLI::App& app,
                               launcher::JobOrigin origin, const launcher::PlanOptions& options) {
  if (args.resume.empty() || !options.command.empty()) return;
  auto target = launcher::find_resume_target(launcher::current_environment(), args.resume, origin);
  const std::vector<std::string> given = kept_words();
  const auto shown = leading_options(app, given);
  size_t covered = 0;
  for (const auto& option : shown) covered += option.words.size();
  if (covered != given.size()) {
    throw ConfigError(
        fmt::format("--resume {}: {} is neither an option of dlrun {} nor a program: give dlrun's options (--nproc 4), "
                    "or the whole command line, after --resume {}",
                    args.resume, given[covered], app.get_name(), args.resume));
  }
  const bool for_now =
      std::all_of(shown.begin(), shown.end(), [](const LeadingOption& option) { return shows_only(option.option); });
  run_again(app.get_name(), target, app, shown, for_now);
}

std::string resume_elsewhere_note(const ForegroundArgs& args, launcher::JobOrigin origin) {
  if (args.resume.empty()) return {};
  try {
    const auto target = launcher::find_resume_target(launcher::current_environment(), args.resume, origin);
    std::error_code ec;
    const fs::path here = fs::current_path(ec);
    if (target.workdir.empty() || ec || fs::equivalent(here, target.workdir, ec)) return {};
    return fmt::format(" (job {} was started in {}; a command line given with --resume runs in this directory, {})",
                       target.id, target.workdir, here.string());
  } catch (const Error&) {
    return {};  // said by start_foreground
  }
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
                                    : launcher::default_job_name(options.command);
  // A bare --resume ran dlrun again with the job's words: they stay what the job keeps, without
  // the display options given for this one time.
  command.words = args.resumed_alone && resume ? resume->words : kept_words();
  command.workdir = fs::current_path().string();
  command.grace_seconds = options.grace_seconds;
  command.uses_gpus = uses_gpus;
  command.remote = origin == launcher::JobOrigin::run;
  return std::make_unique<launcher::ForegroundJob>(env, command, std::move(resume));
}

}  // namespace dlrun::cli
