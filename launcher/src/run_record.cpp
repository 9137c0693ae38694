#include "dlrun/launcher/run_record.hpp"

#include <fcntl.h>
#include <unistd.h>

#include <cerrno>
#include <fstream>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "dlrun/error.hpp"
#include "dlrun/launcher/fd_io.hpp"

namespace dlrun::launcher {

void write_run_record(const std::string& run_dir, const RunRecord& record) {
  nlohmann::json json = {
      {"id", record.id},
      {"state", record.state},
      {"world_size", record.world_size},
      {"restarts", record.restarts},
      {"dlrun_pid", record.dlrun_pid},
      {"run_dir", record.run_dir},
      {"updated_at", record.updated_at},
      {"command", record.command},
  };
  if (record.exit_code) json["exit_code"] = *record.exit_code;
  if (!record.reason.empty()) json["reason"] = record.reason;
  if (record.failed_rank) json["failed_rank"] = *record.failed_rank;
  // A command line or path need not be UTF-8: such bytes are written as U+FFFD.
  const std::string text = json.dump(2, ' ', false, nlohmann::json::error_handler_t::replace) + "\n";
  write_file_atomically(run_dir + "/job.json", text);
}

std::optional<RunRecord> read_run_record(const std::string& run_dir) {
  std::ifstream file(run_dir + "/job.json");
  if (!file) return std::nullopt;
  const nlohmann::json json = nlohmann::json::parse(file, nullptr, /*allow_exceptions=*/false);
  if (!json.is_object()) return std::nullopt;
  try {
    RunRecord record;
    record.id = json.value("id", "");
    record.state = json.value("state", "");
    record.world_size = json.value("world_size", 0);
    record.restarts = json.value("restarts", 0);
    record.dlrun_pid = json.value("dlrun_pid", int64_t{0});
    record.run_dir = json.value("run_dir", "");
    record.updated_at = json.value("updated_at", "");
    record.command = json.value("command", std::vector<std::string>{});
    if (json.contains("exit_code") && json["exit_code"].is_number_integer()) {
      record.exit_code = json["exit_code"].get<int>();
    }
    record.reason = json.value("reason", "");
    if (json.contains("failed_rank") && json["failed_rank"].is_number_integer()) {
      record.failed_rank = json["failed_rank"].get<int>();
    }
    return record;
  } catch (const nlohmann::json::exception&) {
    return std::nullopt;  // a field of the wrong type: not a record dlrun wrote
  }
}

}  // namespace dlrun::launcher
