#include "dlrun/launcher/agent_plan.hpp"

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "dlrun/error.hpp"
#include "dlrun/version.hpp"

namespace dlrun::launcher {
namespace {

using Json = nlohmann::json;

const char* color_name(ColorMode mode) {
  switch (mode) {
    case ColorMode::always: return "always";
    case ColorMode::never: return "never";
    case ColorMode::automatic: break;
  }
  return "auto";
}

template <typename T>
Json optional_json(const std::optional<T>& value) {
  return value ? Json(*value) : Json();
}

template <typename T>
std::optional<T> optional_from(const Json& json, const char* key) {
  auto it = json.find(key);
  if (it == json.end() || it->is_null()) return std::nullopt;
  return it->get<T>();
}

}  // namespace

std::string format_agent_plan(const AgentPlan& plan) {
  const PlanOptions& o = plan.options;
  Json gpus;
  if (o.gpus) gpus = {{"count", optional_json(o.gpus->count)}, {"ids", o.gpus->ids}};
  Json json = {
      {"version", k_version},
      {"job_id", plan.job_id},
      {"workdir", plan.workdir},
      {"nproc", optional_json(o.nproc)},
      {"gpus", gpus},
      {"gpus_label", o.gpus_label},
      {"min_ranks", optional_json(o.min_ranks)},
      {"max_ranks", optional_json(o.max_ranks)},
      {"gpu_binding", o.gpu_binding == GpuBinding::all ? "all" : "rank"},
      {"master_addr", o.master_addr},
      {"master_port", optional_json(o.master_port)},
      {"run_dir", o.run_dir},
      {"log_dir", o.log_dir},
      {"env", plan.env},
      {"prefix", o.prefix},
      {"prefix_enabled", o.prefix_enabled},
      {"shown_ranks", optional_json(o.shown_ranks)},
      {"color", color_name(o.color)},
      {"grace_seconds", o.grace_seconds},
      {"max_restarts", o.max_restarts},
      {"tail_lines", o.tail_lines},
      {"quiet", o.quiet},
      {"check_master_port", o.check_master_port},
      {"watchdog_seconds", o.watchdog_seconds},
      {"command", o.command},
  };
  try {
    return json.dump();
  } catch (const nlohmann::json::type_error&) {
    // The plan must reach the hosts exactly: no replacement characters.
    throw ConfigError("dlrun run sends the program, its arguments and the directories to the hosts as JSON, "
                      "which needs UTF-8: one of them is not valid UTF-8");
  }
}

AgentPlan parse_agent_plan(const std::string& text) {
  const Json json = Json::parse(text, nullptr, /*allow_exceptions=*/false);
  if (!json.is_object()) throw Error("the launcher's assignment carries no plan (is dlrun the same version on every host?)");
  auto version = json.find("version");
  if (version == json.end() || !version->is_string() || version->get<std::string>() != k_version) {
    throw Error(fmt::format("this agent is dlrun {} and the launcher dlrun {}: install the same version on every host",
                            k_version, version != json.end() && version->is_string() ? version->get<std::string>()
                                                                                     : "(unknown)"));
  }
  try {
    AgentPlan plan;
    PlanOptions& o = plan.options;
    plan.job_id = json.at("job_id").get<std::string>();
    plan.workdir = json.at("workdir").get<std::string>();
    o.nproc = optional_from<int>(json, "nproc");
    if (const Json& gpus = json.at("gpus"); !gpus.is_null()) {
      o.gpus = GpuRequest{optional_from<int>(gpus, "count"), gpus.at("ids").get<std::vector<std::string>>()};
    }
    o.gpus_label = json.at("gpus_label").get<std::string>();
    o.min_ranks = optional_from<int>(json, "min_ranks");
    o.max_ranks = optional_from<int>(json, "max_ranks");
    o.gpu_binding = json.at("gpu_binding").get<std::string>() == "all" ? GpuBinding::all : GpuBinding::rank;
    o.master_addr = json.at("master_addr").get<std::string>();
    o.master_port = optional_from<int>(json, "master_port");
    o.run_dir = json.at("run_dir").get<std::string>();
    o.log_dir = json.at("log_dir").get<std::string>();
    plan.env = json.at("env").get<Environment>();
    o.prefix = json.at("prefix").get<std::string>();
    o.prefix_enabled = json.at("prefix_enabled").get<bool>();
    o.shown_ranks = optional_from<std::vector<int>>(json, "shown_ranks");
    const std::string color = json.at("color").get<std::string>();
    o.color = color == "always" ? ColorMode::always : color == "never" ? ColorMode::never : ColorMode::automatic;
    o.grace_seconds = json.at("grace_seconds").get<double>();
    o.max_restarts = json.at("max_restarts").get<int>();
    o.tail_lines = json.at("tail_lines").get<int>();
    o.quiet = json.at("quiet").get<bool>();
    o.check_master_port = json.at("check_master_port").get<bool>();
    o.watchdog_seconds = json.at("watchdog_seconds").get<double>();
    o.command = json.at("command").get<std::vector<std::string>>();
    return plan;
  } catch (const nlohmann::json::exception& e) {
    throw Error(std::string("the launcher's plan for this host cannot be read (is dlrun the same version on "
                            "every host?): ") + e.what());
  }
}

}  // namespace dlrun::launcher
