// The program a subcommand runs (what CLI11 left over plus what followed "--"), the usage
// line that says so in --help, and the wording of every usage error, the same for each verb.

#include <sys/stat.h>

#include <algorithm>
#include <cctype>
#include <cstdlib>
#include <map>
#include <regex>

#include <fmt/format.h>
#include <fmt/ranges.h>

#include "commands.hpp"
#include "dlrun/error.hpp"
#include "dlrun/launcher/command_resolution.hpp"
#include "dlrun/launcher/fd_io.hpp"
#include "dlrun/launcher/private_files.hpp"
#include "dlrun/launcher/process.hpp"
#include "dlrun/launcher/ssh.hpp"
#include "dlrun/launcher/text.hpp"

namespace dlrun::cli {
namespace {

bool looks_like_option(const std::string& word) { return word.size() > 1 && word[0] == '-'; }

// The names of the verbs --help lists (the internal ones are hidden).
std::vector<std::string> visible_verbs(const CLI::App& dlrun) {
  std::vector<std::string> names;
  for (const CLI::App* sub : dlrun.get_subcommands([](const CLI::App* s) { return !s->get_group().empty(); })) {
    names.push_back(sub->get_name());
  }
  return names;
}

}  // namespace

std::string plain_parse_error(const std::string& message) {
  // std::regex recurses per character: a value of tens of thousands of characters would
  // overflow the stack. No real option and value is that long; such a message stays as it is.
  if (message.size() > 512) return message;
  static const std::regex conversion(R"(^Could not convert: (\S+) = (.*)$)");
  static const std::regex range(R"(^(\S+): Value (\S+) not in range (\S+) to (\S+)$)");
  static const std::regex repeated(R"(^(\S+): At Most 1 required but received \d+$)");
  // CLI11 prints a double's bounds with six decimals: 36500.000000 reads 36500.
  auto number = [](std::string text) {
    if (text.find('.') == std::string::npos) return text;
    text.erase(text.find_last_not_of('0') + 1);
    if (text.back() == '.') text.pop_back();
    return text;
  };
  std::smatch m;
  if (std::regex_match(message, m, conversion)) return fmt::format("{} {}: not a number", m[1].str(), m[2].str());
  if (std::regex_match(message, m, range)) {
    const std::string high = number(m[4]);
    if (high.size() > 15) return fmt::format("{} {}: must be {} or more", m[1].str(), m[2].str(), number(m[3]));
    return fmt::format("{} {}: must be from {} to {}", m[1].str(), m[2].str(), number(m[3]), high);
  }
  if (std::regex_match(message, m, repeated)) return fmt::format("{} given more than once", m[1].str());
  return message;
}

std::string help_hint(const CLI::App& app) {
  return fmt::format("; see '{} --help'", app.get_parent() ? "dlrun " + app.get_name() : "dlrun");
}

// What other launchers (mpirun, horovodrun, DeepSpeed's) call an option dlrun spells otherwise.
std::optional<std::string> other_launchers_spelling(const std::string& bare) {
  static const std::map<std::string, std::string> spellings = {
      {"-n", "--nproc"},         {"-np", "--nproc"},         {"--np", "--nproc"}, {"-N", "--nproc"},
      {"--num_gpus", "--gpus"},  {"--num-gpus", "--gpus"},   {"-H", "--hosts"},   {"--host", "--hosts"},
      {"--num_nodes", "--hosts"}, {"--num-nodes", "--hosts"}, {"-f", "--hostfile"},
      {"--local-ranks-filter", "--ranks"}, {"--local_ranks_filter", "--ranks"},  // torchrun 2.2's
  };
  auto it = spellings.find(bare);
  if (it == spellings.end()) return std::nullopt;
  return it->second;
}

// torchrun's options dlrun has no counterpart of, and what dlrun does instead.
std::optional<std::string> torchrun_only(const std::string& bare) {
  static const std::map<std::string, std::string> options = {
      {"--run-path", "a .py script runs as python3 SCRIPT: drop it"},
      {"--tee", "every rank's output is on the terminal (--ranks chooses which) and in RUN_DIR/rank-N.log: drop it"},
      {"--redirects", "every rank's output is on the terminal (--ranks chooses which) and in RUN_DIR/rank-N.log: "
                      "drop it"},
      {"-t", "(--tee) every rank's output is on the terminal (--ranks chooses which) and in RUN_DIR/rank-N.log: "
             "drop it"},
      {"-r", "(--redirects) every rank's output is on the terminal (--ranks chooses which) and in "
             "RUN_DIR/rank-N.log: drop it"},
      {"--log-dir", "the logs go to the run directory: --run-dir DIR"},
      {"--logs-specs", "the logs go to the run directory: --run-dir DIR"},
      {"--role", "a job has one role: drop it"},
      {"--start-method", "each rank is a process of its own, started with exec: drop it"},
      {"--local-addr", "the rendezvous address is --master-addr"},
  };
  std::string dashed = bare;
  std::replace(dashed.begin(), dashed.end(), '_', '-');
  auto it = options.find(dashed);
  if (it == options.end()) return std::nullopt;
  return "torchrun's; in dlrun " + it->second;
}

std::string unknown_option_message(const std::string& word, const CLI::App& app) {
  std::vector<std::string> names;
  for (const CLI::Option* option : app.get_options()) {
    for (const auto& name : option->get_lnames()) names.push_back("--" + name);
    for (const auto& name : option->get_snames()) names.push_back("-" + name);
  }
  std::string bare = word.substr(0, word.find('='));
  if (!app.get_parent()) {
    // `dlrun --nproc 2 train.py`: a verb's option before any verb.
    std::vector<std::string> verbs;
    for (const CLI::App* verb : app.get_subcommands([](const CLI::App* sub) { return !sub->get_group().empty(); })) {
      if (verb->get_option_no_throw(bare)) verbs.push_back(verb->get_name());
    }
    if (!verbs.empty()) {
      return fmt::format("unknown option '{}': it is an option of dlrun {}; the command comes first: dlrun {} {}",
                         bare, fmt::join(verbs, ", dlrun "), verbs.front(), fmt::join(invocation(), " "));
    }
  }
  std::optional<std::string> hint;
  if (auto torchrun = torchrun_only(bare); torchrun && app.get_prefix_command() &&
                                            !std::count(names.begin(), names.end(), bare)) {
    return fmt::format("unknown option '{}': {}", bare, *torchrun);
  }
  if (auto habit = other_launchers_spelling(bare)) {
    // Another launcher's option this verb has no counterpart of (-H for dlrun local): no hint.
    if (std::count(names.begin(), names.end(), *habit)) hint = habit;
  } else if (bare.size() == 2) {
    // One letter from another is no likeness ('-n' is not '-h'): only the same letter in the
    // other case ('-F' for '-f'), never help's.
    for (const auto& name : names) {
      if (name.size() == 2 && name != "-h" &&
          std::tolower(static_cast<unsigned char>(name[1])) == std::tolower(static_cast<unsigned char>(bare[1]))) {
        hint = name;
      }
    }
  } else {
    hint = launcher::closest_match(bare, names);
  }
  return fmt::format("unknown option '{}'{}{}", bare, hint ? fmt::format(" (did you mean '{}'?)", *hint) : "",
                     app.get_prefix_command() ? "; put '--' before a program whose name starts with '-'" : "");
}

void refuse_empty_values(const CLI::App& app) {
  // CLI11 takes '' as a value (0 for a number, nothing for an address or a name): the option
  // then did nothing, silently. No option of dlrun's means anything empty.
  for (const CLI::Option* option : app.get_options()) {
    if (option->get_positional() || option->count() == 0 || option->get_expected_min() == 0) continue;
    for (const auto& value : option->results()) {
      if (value.empty()) throw ConfigError(fmt::format("{}: an empty value", option->get_name()));
    }
  }
}

std::optional<std::string> unexpected_words_message(const CLI::App& app) {
  // A verb that ends in a program leaves the program's words over: they are not unexpected.
  if (app.get_prefix_command()) return std::nullopt;
  const std::vector<std::string> words = app.remaining();
  if (words.empty()) return std::nullopt;
  const std::string& word = words.front();
  if (looks_like_option(word)) return unknown_option_message(word, app);
  if (!app.get_parent()) {
    auto hint = launcher::closest_match(word, visible_verbs(app));
    return fmt::format("unknown command '{}'{}", word, hint ? fmt::format(" (did you mean '{}'?)", *hint) : "");
  }
  return fmt::format("unexpected argument '{}'", word);
}

namespace {
std::vector<std::string>& invocation_words() {
  static std::vector<std::string> words;
  return words;
}
}  // namespace

void set_invocation(std::vector<std::string> words) { invocation_words() = std::move(words); }
const std::vector<std::string>& invocation() { return invocation_words(); }

std::vector<std::string> program_words(const CLI::App& app, const Trailing& trailing) {
  std::vector<std::string> words = app.remaining();
  if (!words.empty() && looks_like_option(words.front())) {
    std::string message = unknown_option_message(words.front(), app);
    // `--epochs 1 build/train`: the program's options before the program. The program is the
    // first word after them that names one (a path, a script, a file here, a program in PATH).
    const auto names_a_program = [](const std::string& word) {
      if (word.empty() || looks_like_option(word)) return false;
      if (word.find('/') != std::string::npos || launcher::is_python_script(word)) return true;
      struct stat st;
      if (::stat(word.c_str(), &st) == 0) return true;
      const char* path = std::getenv("PATH");
      try {
        launcher::resolve_program(word, path ? path : "");
        return true;
      } catch (const ConfigError&) {
        return false;
      }
    };
    size_t program = 0;
    for (size_t i = 1; i < words.size() && program == 0; ++i) {
      if (names_a_program(words[i])) program = i;
    }
    // One of dlrun's own options after it (`-y 1 --ssh-config cfg ./train`): the unknown one is
    // dlrun's, misspelled or missing, and what follows is no program's (cfg was taken for one).
    for (size_t i = 1; i < program; ++i) {
      if (looks_like_option(words[i]) && app.get_option_no_throw(words[i].substr(0, words[i].find('=')))) program = 0;
    }
    const std::string bare = words.front().substr(0, words.front().find('='));
    if (program > 0 && message.find("did you mean") == std::string::npos &&
        message.find("torchrun's") == std::string::npos && !other_launchers_spelling(bare)) {
      std::string moved;
      for (size_t i = 0; i < program; ++i) moved += " " + launcher::shell_quote(words[i]);
      message = fmt::format("{}: an option of {} goes after it: {}{}", message.substr(0, message.find(';')),
                            launcher::shell_quote(words[program]), launcher::shell_quote(words[program]), moved);
    }
    throw ConfigError(message + help_hint(app));
  }
  // "--" after the program's name belongs to the program: put it back.
  if (!words.empty() && trailing.present) words.push_back("--");
  words.insert(words.end(), trailing.words.begin(), trailing.words.end());
  return words;
}

std::optional<std::string> misplaced_option(const std::vector<std::string>& program, const CLI::App& app,
                                            const std::vector<std::string>& options) {
  for (size_t i = 1; i < program.size(); ++i) {
    const std::string name = program[i].substr(0, program[i].find('='));
    if (std::find(options.begin(), options.end(), name) == options.end()) continue;
    const size_t taken = program[i].find('=') == std::string::npos && i + 1 < program.size() ? 2 : 1;
    std::vector<std::string> line{"dlrun", app.get_name()};
    line.insert(line.end(), program.begin() + static_cast<std::ptrdiff_t>(i),
                program.begin() + static_cast<std::ptrdiff_t>(i + taken));
    for (size_t j = 0; j < program.size(); ++j) {
      if (j < i || j >= i + taken) line.push_back(program[j]);
    }
    std::string text;
    for (const auto& word : line) text += (text.empty() ? "" : " ") + launcher::shell_quote(word);
    return text;
  }
  return std::nullopt;
}

namespace {
std::map<const CLI::App*, std::string>& usages() {
  static std::map<const CLI::App*, std::string> map;
  return map;
}
}  // namespace

void set_usage(const CLI::App* app, std::string usage) { usages()[app] = std::move(usage); }

std::string Formatter::make_usage(const CLI::App* app, std::string name) const {
  auto it = usages().find(app);
  if (it == usages().end()) return CLI::Formatter::make_usage(app, std::move(name));
  return "Usage: " + it->second + "\n";
}

std::string Formatter::make_option_name(const CLI::Option* option, bool is_positional) const {
  if (is_positional) return CLI::Formatter::make_option_name(option, is_positional);
  // torchrun's spellings with '_' (--nproc_per_node) are accepted, not listed beside the '-' ones.
  const auto& long_names = option->get_lnames();
  std::string names;
  for (const auto& name : option->get_snames()) names += (names.empty() ? "-" : ",-") + name;
  for (const auto& name : long_names) {
    std::string dashed = name;
    std::replace(dashed.begin(), dashed.end(), '_', '-');
    if (dashed != name && std::find(long_names.begin(), long_names.end(), dashed) != long_names.end()) continue;
    names += (names.empty() ? "--" : ",--") + name;
  }
  return names;
}

void write_svg(const std::string& path, const std::string& svg) {
  try {
    launcher::write_file_atomically(path, svg);
  } catch (const SystemError& e) {
    throw ConfigError(fmt::format("--svg {}: {}", path, e.what()));
  }
  // A picture the user asked for is theirs, made as their umask says (dlrun's own files are
  // private: its umask is 077 meanwhile).
  ::chmod(path.c_str(), 0666 & ~launcher::started_umask());
}

}  // namespace dlrun::cli
