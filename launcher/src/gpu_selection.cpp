#include "dlrun/launcher/gpu_selection.hpp"

#include <algorithm>
#include <charconv>

#include <fmt/format.h>
#include <fmt/ranges.h>

#include "dlrun/error.hpp"
#include "dlrun/launcher/text.hpp"

namespace dlrun::launcher {

GpuRequest parse_gpu_request(std::string_view spec) {
  GpuRequest request;
  if (spec.empty()) throw ConfigError("--gpus needs a value: a count (--gpus 4) or a list (--gpus 0,2,3)");
  if (spec.find(',') == std::string_view::npos) {
    auto count = parse_int(spec);
    if (count) {
      if (*count <= 0) {
        throw ConfigError(fmt::format("--gpus {}: the count must be at least 1", spec));
      }
      request.count = *count;
      return request;
    }
  }
  for (auto& id : split(spec, ',')) {
    if (id.empty()) throw ConfigError(fmt::format("--gpus {}: empty entry in the list", spec));
    if (std::find(request.ids.begin(), request.ids.end(), id) != request.ids.end()) {
      throw ConfigError(fmt::format("--gpus {}: GPU {} is listed twice", spec, id));
    }
    request.ids.push_back(std::move(id));
  }
  return request;
}

std::string format_gpu_request(const GpuRequest& request) {
  if (request.count) return std::to_string(*request.count);
  return fmt::format("{}", fmt::join(request.ids, ","));
}

std::vector<std::string> parse_visible_devices(std::string_view value) {
  std::vector<std::string> ids;
  for (auto& id : split(value, ',')) {
    auto trimmed = trim(id);
    if (!trimmed.empty()) ids.emplace_back(trimmed);
  }
  return ids;
}

std::vector<std::string> available_gpus(int discovered_count,
                                        const std::optional<std::string>& visible_devices) {
  if (visible_devices) return parse_visible_devices(*visible_devices);
  std::vector<std::string> ids;
  for (int i = 0; i < discovered_count; ++i) ids.push_back(std::to_string(i));
  return ids;
}

std::vector<std::string> select_gpus(const GpuRequest& request, const std::vector<std::string>& available,
                                     const std::string& label) {
  if (request.count) {
    if (static_cast<size_t>(*request.count) > available.size()) {
      throw ConfigError(fmt::format("{}: only {} GPU{} available ({})", label,
                                    available.size(), available.size() == 1 ? "" : "s",
                                    available.empty() ? "none" : fmt::format("{}", fmt::join(available, ","))));
    }
    return {available.begin(), available.begin() + *request.count};
  }
  for (const auto& id : request.ids) {
    if (std::find(available.begin(), available.end(), id) == available.end()) {
      throw ConfigError(fmt::format("{}: GPU {} is not available (available: {})", label, id,
                                    available.empty() ? "none" : fmt::format("{}", fmt::join(available, ","))));
    }
  }
  return request.ids;
}

}  // namespace dlrun::launcher
