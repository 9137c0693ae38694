#include "dlrun/launcher/config_file.hpp"

#include <fmt/format.h>

#include "dlrun/error.hpp"

namespace dlrun::launcher {

void config_error(const std::string& path, const toml::source_region& where,
                  const std::string& what) {
  throw ConfigError(fmt::format("{}:{}:{}: {}", path, where.begin.line, where.begin.column, what));
}

toml::table parse_config(std::string_view text, const std::string& path) {
  try {
    return toml::parse(text, path);
  } catch (const toml::parse_error& e) {
    config_error(path, e.source(), std::string(e.description()));
  }
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
