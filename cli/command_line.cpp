// The program a subcommand runs (what CLI11 left over plus what followed "--") and the
// usage line that says so in --help.

#include <map>

#include <fmt/format.h>

#include "commands.hpp"
#include "dlrun/error.hpp"
#include "dlrun/launcher/text.hpp"

namespace dlrun::cli {
namespace {

void reject_unknown_option(const std::string& word, const CLI::App& app) {
  std::vector<std::string> names;
  for (const CLI::Option* option : app.get_options()) {
    for (const auto& name : option->get_lnames()) names.push_back("--" + name);
    for (const auto& name : option->get_snames()) names.push_back("-" + name);
  }
  std::string bare = word.substr(0, word.find('='));
  auto hint = launcher::closest_match(bare, names);
  throw ConfigError(fmt::format("unknown option '{}'{}; put '--' before a program whose name "
                                "starts with '-'",
                                bare, hint ? fmt::format(" (did you mean '{}'?)", *hint) : ""));
}

}  // namespace

std::vector<std::string> program_words(const CLI::App& app, const Trailing& trailing) {
  std::vector<std::string> words = app.remaining();
  if (!words.empty() && words.front().size() > 1 && words.front()[0] == '-') {
    reject_unknown_option(words.front(), app);
  }
  // "--" after the program's name belongs to the program: put it back.
  if (!words.empty() && trailing.present) words.push_back("--");
  words.insert(words.end(), trailing.words.begin(), trailing.words.end());
  return words;
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

}  // namespace dlrun::cli
