#pragma once
// $DLRUN_HOME/config.toml: the machine's dlrun settings, one table per part ([scheduler]:
// scheduler_settings.hpp, [retention]: run_retention.hpp, [queue]: queue_settings.hpp). Each part reads its own table;
// what they share is here: parsing the file once per read, and errors that name the file,
// the line and the column.

#include <toml++/toml.h>

#include <string>
#include <string_view>

namespace dlrun::launcher {

// Throws ConfigError("PATH:LINE:COL: WHAT").
[[noreturn]] void config_error(const std::string& path, const toml::source_region& where,
                               const std::string& what);

// The parsed file; ConfigError for one that does not parse, or that has a table (or key)
// other than [scheduler], [retention] and [queue] (a typo would be ignored).
toml::table parse_config(std::string_view text, const std::string& path);
// Its `name` table, or nullptr when it has none; ConfigError for a `name` that is not a table.
const toml::table* config_table(const toml::table& root, const std::string& path,
                                const std::string& name);

}  // namespace dlrun::launcher
