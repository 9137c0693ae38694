#include "dlrun/launcher/job_result.hpp"

#include <nlohmann/json.hpp>

#include "dlrun/launcher/fd_io.hpp"

namespace dlrun::launcher {

std::optional<std::string> read_job_result(const std::string& run_dir) {
  if (run_dir.empty()) return std::nullopt;
  const auto text = read_file(run_dir + "/" + k_result_file_name);
  if (!text || text->size() > k_max_result_bytes) return std::nullopt;
  const auto json = nlohmann::ordered_json::parse(*text, nullptr, false);  // in the program's order
  if (json.is_discarded() || !json.is_object()) return std::nullopt;
  return json.dump(-1, ' ', false, nlohmann::ordered_json::error_handler_t::replace);
}

}  // namespace dlrun::launcher
