#include "dlrun/launcher/config_file.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <vector>

#include "dlrun/error.hpp"
#include "dlrun/launcher/text.hpp"

namespace dlrun::launcher {

void config_error(const std::string& path, const toml::source_region& where,
                  const std::string& what) {
  throw ConfigError(fmt::format("{}:{}:{}: {}", path, where.begin.line, where.begin.column, what));
}

toml::table parse_config(std::string_view text, const std::string& path) {
  toml::table root;
  try {
    root = toml::parse(text, path);
  } catch (const toml::parse_error& e) {
    config_error(path, e.source(), std::string(e.description()));
  }
  // A misspelt table would be read by no part: its settings would be ignored without a word.
  static const std::vector<std::string> k_tables = {"scheduler", "retention", "queue"};
  for (const auto& [key, value] : root) {
    const std::string name(key.str());
    if (std::find(k_tables.begin(), k_tables.end(), name) != k_tables.end()) continue;
    const auto close = closest_match(name, k_tables);
    config_error(path, key.source(),
                 fmt::format("unknown {} '{}'{}: the file has [scheduler] (docs/scheduling.md), "
                             "[retention] and [queue] (docs/jobs.md)",
                             value.is_table() ? "table" : "key", name,
                             close ? fmt::format(" (did you mean [{}]?)", *close) : ""));
  }
  return root;
}

const toml::table* config_table(const toml::table& root, const std::string& path,
                                const std::string& name) {
  const toml::node* node = root.get(name);
  if (!node) return nullptr;
  const toml::table* table = node->as_table();
  if (!table)
    config_error(path, node->source(), fmt::format("'{}' must be a table: [{}]", name, name));
  return table;
}

}  // namespace dlrun::launcher
