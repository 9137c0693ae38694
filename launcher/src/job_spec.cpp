#include "dlrun/launcher/job_environment.hpp"
#include "dlrun/launcher/job_spec.hpp"
#include "dlrun/launcher/job_ref.hpp"

#include <algorithm>
#include <cctype>
#include <cmath>
#include <cstdlib>
#include <filesystem>
#include <limits>

#include <fmt/format.h>
#include <toml++/toml.h>

#include "dlrun/error.hpp"
#include "dlrun/launcher/duration_limit.hpp"
#include "dlrun/launcher/host_list.hpp"
#include "dlrun/launcher/rank_env.hpp"
#include "dlrun/launcher/text.hpp"
#include "dlrun/launcher/toml_depth.hpp"
#include "dlrun/protocol.hpp"

namespace dlrun::launcher {
namespace {

const std::vector<std::string> k_top_keys = {"name", "command", "workdir", "env", "export_env", "resources",
                                             "max_restarts", "grace", "watchdog",
                                             "checkpoint_dir", "log_dir", "scheduler"};
const std::vector<std::string> k_resource_keys = {"nproc", "gpus"};
const std::vector<std::string> k_scheduler_keys = {"kind", "policy", "hosts", "hostfile", "gpu", "ssh_config",
                                                   "remote_dlrun", "connect_timeout", "join_timeout", "partition",
                                                   "nodes", "ranks_per_node", "gpus_per_node", "time_limit",
                                                   "account", "sbatch_options"};
const std::vector<std::string> k_scheduler_kinds = {"local", "slurm", "ssh"};
const std::vector<std::string> k_policies = {"goodput", "fifo"};

bool is_control(char c) { return static_cast<unsigned char>(c) < 0x20 || c == 0x7f; }

// A TOML float as it reads in a file: 2.0, not 2 (which would be an integer).
std::string format_toml_float(const toml::node& node) {
  std::string text = fmt::format("{}", node.value<double>().value_or(0));
  if (text.find_first_of(".ein") == std::string::npos) text += ".0";
  return text;
}

std::string describe_control(char c) {
  switch (c) {
    case '\n': return "a newline";
    case '\r': return "a carriage return";
    case '\t': return "a tab";
    case '\0': return "a NUL byte";
    default: return fmt::format("byte 0x{:02x}", static_cast<unsigned char>(c));
  }
}

// What a shell (the sbatch script's `export NAME=…`) and every program take as a variable name.
bool is_variable_name(const std::string& name) {
  auto word = [](char c) { return c == '_' || std::isalnum(static_cast<unsigned char>(c)); };
  return !name.empty() && !std::isdigit(static_cast<unsigned char>(name[0])) &&
         std::all_of(name.begin(), name.end(), word) && name.size() <= k_max_name_bytes;
}

class Checker {
 public:
  Checker(const std::string& path, const std::string& base_dir, std::optional<std::string> home)
      : m_path(path), m_base(base_dir), m_home(std::move(home)) {
    if (!m_home) {
      if (const char* env_home = std::getenv("HOME")) m_home = env_home;
    }
  }

  void error(const toml::source_region& where, const std::string& message) {
    if (where.begin.line == 0) return error_at_file(message);  // a table the file does not have
    m_errors.push_back({{where.begin.line, where.begin.column},
                        fmt::format("{}:{}:{}: {}", m_path, where.begin.line, where.begin.column, message)});
  }
  // After the errors with a place in the file.
  void error_at_file(const std::string& message) {
    m_errors.push_back({{k_no_line, 0}, fmt::format("{}: {}", m_path, message)});
  }

  void unknown_keys(const toml::table& table, const std::vector<std::string>& known,
                    const std::string& where) {
    for (const auto& [key, node] : table) {
      std::string name(key.str());
      if (std::find(known.begin(), known.end(), name) != known.end()) continue;
      std::string hint;
      const bool top_key = !where.empty() && std::find(k_top_keys.begin(), k_top_keys.end(), name) != k_top_keys.end();
      // A key of another table, here: its table is named.
      std::string table_of;
      for (const auto& [table, keys] : {std::pair{"resources", &k_resource_keys}, std::pair{"scheduler", &k_scheduler_keys}}) {
        if (where != table && std::find(keys->begin(), keys->end(), name) != keys->end()) table_of = table;
      }
      if (top_key) {
        hint = " (it belongs at the top, before any [table])";
      } else if (auto close = closest_match(name, known)) {
        hint = fmt::format(" (did you mean '{}'?)", *close);
      } else if (!table_of.empty()) {
        hint = fmt::format(" (it belongs in [{}])", table_of);
      } else if (auto top = where.empty() ? std::nullopt : closest_match(name, k_top_keys)) {
        hint = fmt::format(" (did you mean '{}'? it belongs at the top, before any [table])", *top);
      } else {
        hint = fmt::format(" (known keys: {})", join(known));
      }
      error(key.source(), fmt::format("unknown key '{}'{}{}", name, where.empty() ? "" : " in [" + where + "]", hint));
    }
  }

  // A string that goes on one line (a name, a path, an #SBATCH line): no newline can start
  // another line of the sbatch script, and none is longer than `max_bytes`.
  std::optional<std::string> string(const toml::node* node, const std::string& key,
                                    size_t max_bytes = k_max_path_bytes) {
    if (!node) return std::nullopt;
    if (auto v = node->value<std::string>(); v && node->is_string()) {
      if (one_line(*node, key, *v, max_bytes)) return *v;
      return std::nullopt;
    }
    error(node->source(), fmt::format("'{}' must be a string, not {}", key, type_name(*node)));
    return std::nullopt;
  }

  bool one_line(const toml::node& node, const std::string& key, const std::string& text, size_t max_bytes) {
    if (auto c = std::find_if(text.begin(), text.end(), is_control); c != text.end()) {
      error(node.source(), fmt::format("'{}' must not contain control characters ({})", key, describe_control(*c)));
      return false;
    }
    if (text.size() > max_bytes) {
      error(node.source(), fmt::format("'{}' is {} bytes long: at most {}", key, text.size(), max_bytes));
      return false;
    }
    return true;
  }

  // An argument or NAME=value that reaches exec. `form` names it in messages when it is not `what`.
  bool exec_string(const toml::node& node, const std::string& what, std::string_view text,
                   std::string_view form = {}) {
    if (text.find('\0') != std::string_view::npos) {
      error(node.source(), fmt::format("{} holds a NUL byte (\\u0000): a program cannot be given one", what));
      return false;
    }
    if (text.size() > k_max_exec_string_bytes) {
      error(node.source(), fmt::format("{} is too long to pass to a program: {} bytes{}, at most {}", what,
                                       text.size(), form.empty() ? "" : fmt::format(" as {}", form),
                                       k_max_exec_string_bytes));
      return false;
    }
    m_exec_bytes += text.size() + 1;
    return true;
  }

  void exec_total() {
    if (m_exec_bytes <= k_max_exec_total_bytes) return;
    error_at_file(fmt::format("command and [env] together are {} bytes: at most {} bytes, to leave room for the "
                              "rest of the ranks' environment",
                              m_exec_bytes, k_max_exec_total_bytes));
  }

  std::optional<double> duration(const toml::node* node, const std::string& key) {
    if (!node) return std::nullopt;
    auto v = node->value<double>();  // an integer too large for a double has none
    if (!node->is_number()) {
      error(node->source(), fmt::format("'{}' must be a number, not {}", key, type_name(*node)));
    } else if (auto problem = duration_problem(v ? *v : std::numeric_limits<double>::infinity())) {
      error(node->source(), fmt::format("'{}' = {}", key, *problem));
    } else {
      return v;
    }
    return std::nullopt;
  }

  std::optional<int> integer(const toml::node* node, const std::string& key, int lo, int hi) {
    if (!node) return std::nullopt;
    if (!node->is_integer()) {
      // 1.0 is a TOML float: the whole number it means is written without the point.
      const auto whole = node->is_floating_point() ? node->value<double>() : std::nullopt;
      if (whole && std::isfinite(*whole) && *whole == std::floor(*whole) && std::abs(*whole) < 1e15) {
        error(node->source(), fmt::format("'{}' must be a whole number, written without a point ({} = {:.0f})", key,
                                          key, *whole));
      } else {
        error(node->source(), fmt::format("'{}' must be a whole number, not {}", key,
                                          node->is_floating_point() ? format_toml_float(*node) : type_name(*node)));
      }
      return std::nullopt;
    }
    int64_t v = *node->value<int64_t>();
    if (v < lo || v > hi) {
      error(node->source(), fmt::format("'{}' = {} is out of range: must be {} to {}", key, v, lo, hi));
      return std::nullopt;
    }
    return static_cast<int>(v);
  }

  // 4, or "2:4" for elastic jobs.
  std::optional<RankRange> rank_range(const toml::node* node, const std::string& key) {
    if (!node) return std::nullopt;
    if (node->is_integer()) {
      auto v = integer(node, key, 1, k_max_rank_count);
      if (!v) return std::nullopt;
      return RankRange{*v, *v};
    }
    if (node->is_string()) {
      std::string text = *node->value<std::string>();
      auto colon = text.find(':');
      auto lo = colon == std::string::npos ? std::nullopt : parse_int(text.substr(0, colon));
      auto hi = colon == std::string::npos ? std::nullopt : parse_int(text.substr(colon + 1));
      if (lo && hi && *lo >= 1 && *hi >= *lo && *hi <= k_max_rank_count) return RankRange{*lo, *hi};
      if (colon == std::string::npos && parse_int(text)) {
        // "2": a count in quotes.
        error(node->source(), fmt::format("'{}' = \"{}\": a count is a number ({} = {}), an elastic range is "
                                          "\"MIN:MAX\" (\"2:4\")",
                                          key, text, key, text));
        return std::nullopt;
      }
      error(node->source(), fmt::format("'{}' = \"{}\": expected \"MIN:MAX\" with 1 <= MIN <= MAX <= {}, e.g. "
                                        "\"2:4\"",
                                        key, text, k_max_rank_count));
      return std::nullopt;
    }
    // A number that is not a whole count (1.5) is named as what it is: a fraction.
    std::string what = type_name(*node);
    if (node->is_floating_point()) {
      const double v = node->value<double>().value_or(0);
      what = fmt::format("{} (a count is {})", format_toml_float(*node),
                         std::isfinite(v) && v == std::floor(v) && std::abs(v) < 1e15
                             ? fmt::format("written without a point: {:.0f}", v)
                             : "a whole number");
    }
    error(node->source(), fmt::format("'{}' must be a count (2) or an elastic range (\"2:4\"){}, not {}", key,
                                      key == "gpus" ? " or a list of GPUs ([0, 2])" : "", what));
    return std::nullopt;
  }

  // A directory key: relative to the job file's directory; a leading ~ or ~/ is $HOME, as in a
  // shell. No other shell expansion happens, so ~user and $NAME are refused with why (they would
  // have named a directory called "~user" or "$NAME" beside the job file).
  std::string directory(const toml::node* node, const std::string& key) {
    auto text = string(node, key);
    if (!text || text->empty()) return {};
    if (text->front() == '~') {
      if (*text != "~" && text->compare(0, 2, "~/") != 0) {
        error(node->source(), fmt::format("'{}' = \"{}\": ~user is not expanded here; write the whole path", key,
                                          *text));
        return {};
      }
      if (!m_home || m_home->empty()) {
        error(node->source(), fmt::format("'{}' = \"{}\": it starts with ~, but HOME is not set; write the whole "
                                          "path",
                                          key, *text));
        return {};
      }
      *text = *m_home + text->substr(1);
    }
    if (auto dollar = text->find('$'); dollar != std::string::npos && dollar + 1 < text->size() &&
                                       (std::isalpha(static_cast<unsigned char>((*text)[dollar + 1])) ||
                                        (*text)[dollar + 1] == '_' || (*text)[dollar + 1] == '{')) {
      error(node->source(), fmt::format("'{}' = \"{}\": variables are not expanded in job.toml; write the path "
                                        "itself (relative paths are relative to the job file)",
                                        key, *text));
      return {};
    }
    std::filesystem::path p(*text);
    if (p.is_relative()) p = std::filesystem::path(m_base) / p;
    p = p.lexically_normal();
    if (p.has_relative_path() && p.filename().empty()) p = p.parent_path();  // "dir/." is "dir"
    return p.string();
  }

  void finish() const {
    if (m_errors.empty()) return;
    // In the file's order, whatever order the keys were checked in.
    auto errors = m_errors;
    std::stable_sort(errors.begin(), errors.end(), [](const auto& a, const auto& b) { return a.first < b.first; });
    std::string all;
    for (const auto& [where, e] : errors) all += (all.empty() ? "" : "\n") + e;
    throw ConfigError(all);
  }

  static std::string type_name(const toml::node& node) {
    switch (node.type()) {
      case toml::node_type::string: return "a string";
      case toml::node_type::integer: return "an integer";
      case toml::node_type::floating_point: return "a number";
      case toml::node_type::boolean: return "a boolean";
      case toml::node_type::array: return "an array";
      case toml::node_type::table: return "a table";
      default: return "a date/time";
    }
  }

  static std::string join(const std::vector<std::string>& words) {
    std::string out;
    for (const auto& w : words) out += (out.empty() ? "" : ", ") + w;
    return out;
  }

 private:
  std::string m_path;
  std::string m_base;
  std::optional<std::string> m_home;
  static constexpr uint32_t k_no_line = std::numeric_limits<uint32_t>::max();
  std::vector<std::pair<std::pair<uint32_t, uint32_t>, std::string>> m_errors;  // (line, column), message
  size_t m_exec_bytes = 0;
};

void parse_command(Checker& check, const toml::node* node, JobSpec& spec) {
  if (!node) {
    check.error_at_file("missing required key 'command' (e.g. command = [\"./train\", \"--epochs\", \"3\"])");
    return;
  }
  const toml::array* array = node->as_array();
  if (!array || array->empty()) {
    check.error(node->source(), "'command' must be a non-empty array of strings, e.g. [\"python3\", \"train.py\"]");
    return;
  }
  for (const auto& item : *array) {
    if (!item.is_string()) {
      check.error(item.source(), fmt::format("'command' items must be strings, not {}", Checker::type_name(item)));
      continue;
    }
    std::string word = *item.value<std::string>();
    if (check.exec_string(item, fmt::format("'command' item {}", spec.command.size() + 1), word)) {
      spec.command.push_back(std::move(word));
    }
  }
}

void parse_export_env(Checker& check, const toml::node* node, JobSpec& spec) {
  if (!node) return;
  const toml::array* array = node->as_array();
  if (!array) {
    check.error(node->source(), "'export_env' must be an array of names, e.g. [\"WANDB_API_KEY\", \"HF_*\"]");
    return;
  }
  for (const auto& item : *array) {
    auto pattern = item.value<std::string>();
    if (!item.is_string() || !valid_export_pattern(*pattern) || pattern->size() > k_max_name_bytes) {
      check.error(item.source(), "'export_env' items are variable names, NAME_PREFIX* or \"*\" (everything)");
      continue;
    }
    spec.export_env.push_back(*pattern);
  }
}

void add_gpu_id(Checker& check, const toml::node& where, const std::string& id, JobSpec& spec) {
  if (std::find(spec.gpu_ids.begin(), spec.gpu_ids.end(), id) != spec.gpu_ids.end()) {
    check.error(where.source(), fmt::format("GPU {} is listed twice in 'gpus'", id));
  }
  spec.gpu_ids.push_back(id);
}

// gpus = "0,2": these GPUs, as `dlrun local --gpus 0,2` (the same as gpus = [0, 2]).
void parse_gpu_list(Checker& check, const toml::node& node, const std::string& text, JobSpec& spec) {
  if (text.find(',') == std::string::npos) {
    // The examples show the value itself where it is a number ("3": gpus = 3 or gpus = [3]),
    // placeholders where it is not ("device=1" is dlrun local's spelling, not the job file's).
    const auto n = parse_int(trim(text.rfind("device=", 0) == 0 ? text.substr(7) : text));
    const std::string count = n && *n >= 1 ? std::to_string(*n) : "N";
    const std::string one = n && *n >= 0 ? std::to_string(*n) : "K";
    check.error(node.source(), fmt::format("'gpus' = \"{}\": a count is a number (gpus = {}), one GPU by its number "
                                           "is a list (gpus = [{}]), an elastic range is \"MIN:MAX\"",
                                           text, count, one));
    return;
  }
  for (const auto& word : split(text, ',')) {
    auto n = parse_int(trim(word));
    if (!n || *n < 0) {
      check.error(node.source(), fmt::format("'gpus' = \"{}\": '{}' is not a GPU number (0, 1, …)", text, trim(word)));
      return;
    }
    add_gpu_id(check, node, std::to_string(*n), spec);
  }
}

void parse_resources(Checker& check, const toml::node* node, JobSpec& spec) {
  const toml::table* table = node ? node->as_table() : nullptr;
  if (node && !table) {
    check.error(node->source(), "'resources' must be a table: [resources]");
    return;
  }
  if (!table) {
    check.error_at_file("missing [resources]: say nproc = N (CPU ranks) or gpus = N (one rank per GPU)");
    return;
  }
  check.unknown_keys(*table, k_resource_keys, "resources");
  spec.nproc = check.rank_range(table->get("nproc"), "nproc");
  if (const toml::node* gpus = table->get("gpus")) {
    if (const toml::array* ids = gpus->as_array()) {
      for (const auto& id : *ids) {
        if (auto n = id.value<int64_t>(); n && id.is_integer() && *n >= 0) {
          add_gpu_id(check, id, std::to_string(*n), spec);
        } else {
          check.error(id.source(), "'gpus' list items must be GPU numbers (0, 1, …)");
        }
      }
      if (ids->empty()) check.error(gpus->source(), "'gpus' = []: list at least one GPU, or use nproc");
    } else if (auto text = gpus->value<std::string>(); text && gpus->is_string() && text->find(':') == std::string::npos) {
      parse_gpu_list(check, *gpus, *text, spec);
    } else {
      spec.gpus = check.rank_range(gpus, "gpus");
    }
    if (!spec.gpu_ids.empty()) {
      int n = static_cast<int>(spec.gpu_ids.size());
      spec.gpus = RankRange{n, n};
    }
  }
  if (table->contains("nproc") && table->contains("gpus")) {
    check.error(table->get("gpus")->source(), "give either nproc (CPU ranks) or gpus (one rank per GPU), not both");
  } else if (!table->contains("nproc") && !table->contains("gpus")) {
    check.error(table->source(), "[resources] needs nproc = N (CPU ranks) or gpus = N (one rank per GPU)");
  }
}

void parse_env(Checker& check, const toml::node* node, JobSpec& spec, bool stored) {
  if (!node) return;
  const toml::table* table = node->as_table();
  if (!table) {
    check.error(node->source(), "'env' must be a table: [env] with NAME = \"value\" lines");
    return;
  }
  for (const auto& [key, value] : *table) {
    std::string name(key.str());
    std::string text;
    if (!is_variable_name(name)) {
      check.error(key.source(), fmt::format("'{}' is not a valid environment variable name: letters, digits and _, "
                                            "not starting with a digit, at most {} bytes",
                                            name.substr(0, 64), k_max_name_bytes));
    } else if (value.is_string()) {
      text = *value.value<std::string>();
    } else if (value.is_integer() || value.is_floating_point() || value.is_boolean()) {
      text = value.is_boolean() ? (*value.value<bool>() ? "1" : "0")
             : value.is_integer() ? std::to_string(*value.value<int64_t>())
                                  : fmt::format("{}", *value.value<double>());
    } else {
      check.error(value.source(), fmt::format("env '{}' must be a string, number or boolean", name));
      continue;
    }
    if (!is_variable_name(name)) continue;
    if (auto why = stored ? std::nullopt : reserved_env(name)) {
      check.error(key.source(), *why);
      continue;
    }
    if (check.exec_string(value, fmt::format("env '{}'", name), name + "=" + text, name + "=value")) {
      spec.env[name] = std::move(text);
    }
  }
}

// The keys each scheduler kind accepts in [scheduler], besides `kind`.
const std::vector<std::pair<std::string, std::vector<std::string>>> k_kind_keys = {
    {"local", {"policy"}},
    {"ssh", {"hosts", "hostfile", "gpu", "ssh_config", "remote_dlrun", "connect_timeout", "join_timeout"}},
    {"slurm", {"partition", "nodes", "ranks_per_node", "gpus_per_node", "account", "sbatch_options"}},
};
// (time_limit is every kind's: sbatch --time for Slurm, the supervisor's own limit for the others.)

void parse_ssh_keys(Checker& check, const toml::table& table, JobSpec& spec) {
  if (const toml::node* list = table.get("hosts"); list && list->is_array()) {
    check.error(list->source(), "'hosts' is one string, as dlrun run --hosts takes it: hosts = \"a:4,b:4\"");
  } else if (auto hosts = check.string(table.get("hosts"), "hosts")) {
    try {
      parse_host_list(*hosts);
      spec.hosts = *hosts;
    } catch (const ConfigError& e) {
      check.error(table.get("hosts")->source(), e.what());
    }
  }
  spec.hostfile = check.directory(table.get("hostfile"), "hostfile");
  spec.ssh_config = check.directory(table.get("ssh_config"), "ssh_config");
  // A path on the other hosts, as dlrun run --remote-dlrun: taken as it is written.
  if (auto v = check.string(table.get("remote_dlrun"), "remote_dlrun")) spec.remote_dlrun = *v;
  if (auto v = check.duration(table.get("connect_timeout"), "connect_timeout")) spec.connect_timeout = *v;
  if (auto v = check.duration(table.get("join_timeout"), "join_timeout")) spec.join_timeout = *v;
  if (const toml::node* gpu = table.get("gpu")) {
    if (gpu->is_boolean()) spec.gpu_slots = *gpu->value<bool>();
    else check.error(gpu->source(), fmt::format("'gpu' must be true or false, not {}", Checker::type_name(*gpu)));
  }
  // (hosts given but wrong is said where it is written, not again as missing)
  const bool hosts_given = table.get("hosts") != nullptr || !spec.hostfile.empty();
  if (spec.scheduler == "ssh" && spec.hosts.empty() == spec.hostfile.empty() &&
      !(spec.hosts.empty() && spec.hostfile.empty() && hosts_given)) {
    check.error(table.source(), "kind = \"ssh\" needs hosts = \"a:4,b:4\" or hostfile = \"FILE\" (one of them)");
  }
}

// Whether sbatch --time takes `text`: MINUTES, MINUTES:SECONDS, HOURS:MINUTES:SECONDS,
// DAYS-HOURS, DAYS-HOURS:MINUTES, DAYS-HOURS:MINUTES:SECONDS, or UNLIMITED / INFINITE.
bool slurm_time_limit(std::string_view text);

// Its seconds (0 for UNLIMITED); nullopt when it is not such a time.
std::optional<double> slurm_time_seconds(std::string_view text) {
  if (!slurm_time_limit(text)) return std::nullopt;
  std::string upper(text);
  std::transform(upper.begin(), upper.end(), upper.begin(), [](unsigned char c) { return std::toupper(c); });
  if (upper == "UNLIMITED" || upper == "INFINITE") return 0.0;
  std::optional<double> days;
  if (const auto dash = text.find('-'); dash != std::string_view::npos) {
    days = std::stod(std::string(text.substr(0, dash)));
    text.remove_prefix(dash + 1);
  }
  std::vector<double> p;
  for (size_t start = 0;;) {
    const size_t colon = text.find(':', start);
    p.push_back(std::stod(std::string(text.substr(start, colon == std::string_view::npos ? std::string_view::npos
                                                                                         : colon - start))));
    if (colon == std::string_view::npos) break;
    start = colon + 1;
  }
  p.resize(3, 0.0);
  if (days) return ((*days * 24 + p[0]) * 60 + p[1]) * 60 + p[2];  // DAYS-HOURS[:MINUTES[:SECONDS]]
  const size_t given = static_cast<size_t>(std::count(text.begin(), text.end(), ':')) + 1;
  if (given == 3) return (p[0] * 60 + p[1]) * 60 + p[2];  // HOURS:MINUTES:SECONDS
  return p[0] * 60 + p[1];                                // MINUTES[:SECONDS]
}

bool slurm_time_limit(std::string_view text) {
  std::string upper(text);
  std::transform(upper.begin(), upper.end(), upper.begin(), [](unsigned char c) { return std::toupper(c); });
  if (upper == "UNLIMITED" || upper == "INFINITE") return true;
  auto digits = [](std::string_view part) {
    return !part.empty() && part.size() <= 9 &&
           std::all_of(part.begin(), part.end(), [](unsigned char c) { return std::isdigit(c); });
  };
  if (const auto dash = text.find('-'); dash != std::string_view::npos) {
    if (!digits(text.substr(0, dash))) return false;
    text.remove_prefix(dash + 1);
  }
  int fields = 0;
  for (size_t start = 0;; ++fields) {
    const size_t colon = text.find(':', start);
    if (!digits(text.substr(start, colon == std::string_view::npos ? std::string_view::npos : colon - start))) return false;
    if (colon == std::string_view::npos) break;
    start = colon + 1;
  }
  return fields < 3;
}

void parse_slurm_keys(Checker& check, const toml::table& table, JobSpec& spec) {
  SlurmSpec& slurm = spec.slurm;
  if (auto v = check.string(table.get("partition"), "partition", k_max_name_bytes)) slurm.partition = *v;
  // A number is minutes, as sbatch --time takes it (time_limit = 90).
  std::optional<std::string> limit;
  if (const toml::node* node = table.get("time_limit"); node && node->is_integer()) {
    limit = std::to_string(*node->value<int64_t>());
  } else {
    limit = check.string(table.get("time_limit"), "time_limit", k_max_name_bytes);
  }
  if (auto v = limit) {
    if (const auto seconds = slurm_time_seconds(*v)) {
      slurm.time_limit = *v;
      spec.time_limit = *seconds;
    } else {
      // sbatch refused it with exit 69, which reads as "Slurm is down, try again".
      check.error(table.get("time_limit")->source(),
                  fmt::format("time_limit {} is not a time Slurm takes: MINUTES (90), \"HH:MM:SS\", "
                              "\"DAYS-HH:MM:SS\" (\"2-00:00:00\"), or \"UNLIMITED\"",
                              table.get("time_limit")->is_integer() ? *v : "\"" + v->substr(0, 64) + "\""));
    }
  }
  if (auto v = check.string(table.get("account"), "account", k_max_name_bytes)) slurm.account = *v;
  if (auto v = check.integer(table.get("nodes"), "nodes", 1, 100000)) slurm.nodes = *v;
  if (auto v = check.integer(table.get("ranks_per_node"), "ranks_per_node", 1, 100000)) slurm.ranks_per_node = *v;
  if (auto v = check.integer(table.get("gpus_per_node"), "gpus_per_node", 1, 1024)) slurm.gpus_per_node = *v;
  if (table.contains("ranks_per_node") && table.contains("gpus_per_node")) {
    check.error(table.get("gpus_per_node")->source(),
                "give ranks_per_node (CPU ranks) or gpus_per_node (one rank per GPU), not both");
  }
  if (const toml::node* node = table.get("sbatch_options")) {
    const toml::array* array = node->as_array();
    if (!array) {
      check.error(node->source(), "'sbatch_options' must be an array of strings, e.g. [\"--qos=high\"]");
    } else {
      for (const auto& item : *array) {
        if (auto option = check.string(&item, "sbatch_options")) slurm.sbatch_options.push_back(*option);
      }
    }
  }
}

void parse_scheduler(Checker& check, const toml::node* node, JobSpec& spec, const std::string& kind_override) {
  const toml::table* table = node ? node->as_table() : nullptr;
  if (node && !table) {
    check.error(node->source(), "'scheduler' must be a table: [scheduler] with kind = \"local\"");
    return;
  }
  toml::table empty;
  if (!table) table = &empty;
  check.unknown_keys(*table, k_scheduler_keys, "scheduler");
  if (auto kind = check.string(table->get("kind"), "kind")) {
    if (std::find(k_scheduler_kinds.begin(), k_scheduler_kinds.end(), *kind) == k_scheduler_kinds.end()) {
      auto hint = closest_match(*kind, k_scheduler_kinds);
      check.error(table->get("kind")->source(),
                  fmt::format("unknown scheduler kind '{}'{}", *kind,
                              hint ? fmt::format(" (did you mean '{}'?)", *hint) : " (local, slurm or ssh)"));
    } else {
      spec.scheduler = *kind;
    }
  }
  if (!kind_override.empty()) spec.scheduler = kind_override;
  for (const auto& [kind, keys] : k_kind_keys) {
    for (const auto& key : keys) {
      if (table->contains(key) && spec.scheduler != kind) {
        check.error(table->get(key)->source(), fmt::format("'{}' is for kind = \"{}\"", key, kind));
      }
    }
  }
  parse_ssh_keys(check, *table, spec);
  parse_slurm_keys(check, *table, spec);
  if (auto policy = check.string(table->get("policy"), "policy", k_max_name_bytes)) {
    if (std::find(k_policies.begin(), k_policies.end(), *policy) == k_policies.end()) {
      auto hint = closest_match(*policy, k_policies);
      check.error(table->get("policy")->source(),
                  fmt::format("unknown policy '{}'{}", *policy,
                              hint ? fmt::format(" (did you mean '{}'?)", *hint) : " (goodput or fifo)"));
    } else {
      spec.policy = *policy == "goodput" ? SharePolicy::goodput : SharePolicy::fifo;
    }
  }
}

// The goodput scheduler sizes GPU jobs that let it choose their GPUs: elastic ones by
// default, rigid ones when asked (it then only starts them). Checked after [resources].
void settle_policy(Checker& check, const toml::node* scheduler, JobSpec& spec) {
  const toml::node* asked = nullptr;
  if (scheduler && scheduler->as_table()) asked = scheduler->as_table()->get("policy");
  if (!asked) {
    spec.policy = spec.scheduler == "local" && spec.gpus && spec.gpus->elastic() && spec.gpu_ids.empty()
                      ? SharePolicy::goodput
                      : SharePolicy::fifo;
    return;
  }
  if (spec.policy != SharePolicy::goodput || spec.scheduler != "local") return;
  if (!spec.gpus && spec.nproc) {
    check.error(asked->source(), "policy = \"goodput\" shares GPUs: give [resources] gpus (CPU jobs are queued in "
                                 "order, policy = \"fifo\")");
  } else if (!spec.gpu_ids.empty()) {
    check.error(asked->source(), "policy = \"goodput\" chooses the GPUs: give gpus = N or \"MIN:MAX\", not a list");
  }
}

}  // namespace

const std::vector<std::string>& job_spec_keys(std::string_view table) {
  if (table == "resources") return k_resource_keys;
  if (table == "scheduler") return k_scheduler_keys;
  return k_top_keys;
}

JobSpec parse_job_spec(std::string_view text, const std::string& path, const std::string& base_dir,
                       const std::string& kind_override, bool stored, const std::optional<std::string>& home) {
  if (text.size() > k_max_job_file_bytes) {
    throw ConfigError(fmt::format("{}: the job file is too large: at most {} bytes are accepted", path,
                                  k_max_job_file_bytes));
  }
  // toml++ recurses once per dotted part: a header of thousands of parts would overflow the stack.
  if (auto deep = find_toml_too_deep(text)) {
    throw ConfigError(fmt::format("{}:{}:{}: {}: not accepted in a job file", path, deep->line, deep->column,
                                  deep->message));
  }
  toml::table root;
  try {
    root = toml::parse(text, path);
  } catch (const toml::parse_error& e) {
    // `name = train`: TOML's strings are quoted, which its parser does not say.
    const std::string_view description = e.description();
    std::string hint;
    {
      // The line as written, its value quoted: `name = train` -> name = "train".
      size_t begin = 0;
      for (size_t line = 1; line < e.source().begin.line && begin != std::string::npos; ++line) {
        begin = text.find('\n', begin);
        if (begin != std::string::npos) ++begin;
      }
      std::string line = begin == std::string::npos ? std::string() : std::string(text.substr(begin, text.find('\n', begin) - begin));
      line = line.substr(0, line.find('#'));
      const size_t equals = line.find('=');
      const std::string key(trim(line.substr(0, equals == std::string::npos ? 0 : equals)));
      const std::string value(trim(equals == std::string::npos ? std::string_view() : std::string_view(line).substr(equals + 1)));
      // A bare word: not a number, boolean, date, array, table or quoted string.
      const bool bare_word = !value.empty() && std::isalpha(static_cast<unsigned char>(value[0])) &&
                             value.find_first_of("\"'[]{}=") == std::string::npos && value != "true" &&
                             value != "false" && value != "inf" && value != "nan";
      if (!key.empty() && bare_word) {
        hint = fmt::format(" (a string needs quotes: {} = \"{}\")", clean_text(key), clean_text(value));
      }
    }
    throw ConfigError(fmt::format("{}:{}:{}: {}{}", path, e.source().begin.line, e.source().begin.column,
                                  description, hint));
  }
  Checker check(path, base_dir, home);
  JobSpec spec;
  check.unknown_keys(root, k_top_keys, "");
  if (auto name = check.string(root.get("name"), "name", k_max_name_bytes)) {
    if (auto problem = stored ? std::nullopt : job_name_problem(*name)) {
      check.error(root.get("name")->source(), "name " + *problem);
    } else {
      spec.name = *name;
    }
  }
  parse_command(check, root.get("command"), spec);
  if (spec.name.empty() && !spec.command.empty()) {
    spec.name = default_job_name(spec.command);
  }
  spec.workdir = check.directory(root.get("workdir"), "workdir");
  if (spec.workdir.empty()) spec.workdir = std::filesystem::path(base_dir).lexically_normal().string();
  parse_env(check, root.get("env"), spec, stored);
  parse_export_env(check, root.get("export_env"), spec);
  check.exec_total();
  parse_scheduler(check, root.get("scheduler"), spec, kind_override);
  if (spec.scheduler == "local") {
    parse_resources(check, root.get("resources"), spec);
  } else if (const toml::node* resources = root.get("resources")) {
    const std::string with = kind_override.empty() ? fmt::format("with [scheduler] kind = \"{}\"", spec.scheduler)
                                                   : fmt::format("with --scheduler {}", spec.scheduler);
    check.error(resources->source(),
                with + (spec.scheduler == "ssh"
                            ? " the ranks come from the hosts' slots: remove [resources] (gpu = true in "
                              "[scheduler] makes each slot a GPU)"
                            : " the ranks come from nodes and ranks_per_node (or gpus_per_node) in [scheduler]: "
                              "remove [resources]"));
  }
  if (spec.gpus && !stored && spec.env.count(env::k_cuda_visible_devices) > 0) {
    check.error(root.get("env")->as_table()->get(env::k_cuda_visible_devices)->source(),
                fmt::format("env '{}' is set by dlrun for each rank of a job with gpus (the GPUs the "
                            "scheduler gives it): remove it from [env], or choose GPUs with gpus = [0, 2]",
                            env::k_cuda_visible_devices));
  }
  settle_policy(check, root.get("scheduler"), spec);
  if (auto v = check.integer(root.get("max_restarts"), "max_restarts", 0, 1000000)) spec.max_restarts = *v;
  if (auto v = check.duration(root.get("grace"), "grace")) spec.grace = *v;
  if (auto v = check.duration(root.get("watchdog"), "watchdog")) spec.watchdog = *v;
  spec.checkpoint_dir = check.directory(root.get("checkpoint_dir"), "checkpoint_dir");
  for (size_t open = spec.checkpoint_dir.find('{'); open != std::string::npos;
       open = spec.checkpoint_dir.find('{', open + 1)) {
    if (spec.checkpoint_dir.compare(open, 8, "{job_id}") == 0) continue;
    const size_t close = spec.checkpoint_dir.find('}', open);
    check.error(root.get("checkpoint_dir")->source(),
                fmt::format("'checkpoint_dir' = \"{}\": {} is not known here; {{job_id}} is the job's number (a "
                            "directory per job from one job file)",
                            spec.checkpoint_dir, spec.checkpoint_dir.substr(open, close == std::string::npos
                                                                                      ? std::string::npos
                                                                                      : close - open + 1)));
    break;
  }
  spec.log_dir = check.directory(root.get("log_dir"), "log_dir");
  if (spec.log_dir.find("{job_id}") != std::string::npos) {
    check.error(root.get("log_dir")->source(),
                fmt::format("'log_dir' = \"{}\": each job's logs go to LOG_DIR/ID already (a directory per job): "
                            "leave {{job_id}} out",
                            spec.log_dir));
  }
  check.finish();
  return spec;
}

std::string checkpoint_dir_of(const JobSpec& spec, const std::string& job_id, const std::string& run_dir) {
  if (spec.checkpoint_dir.empty()) return run_dir + "/checkpoints";
  std::string dir = spec.checkpoint_dir;
  for (size_t at = dir.find("{job_id}"); at != std::string::npos; at = dir.find("{job_id}", at + job_id.size())) {
    dir.replace(at, 8, job_id);
  }
  return dir;
}

}  // namespace dlrun::launcher
