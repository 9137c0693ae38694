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
  // A number alone is a count: one GPU by its number is device=3 (Docker's spelling).
  if (constexpr std::string_view device = "device="; spec.substr(0, device.size()) == device) {
    request.ids = parse_gpu_ids(spec.substr(device.size()), "--gpus device=");
    return request;
  }
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
  request.ids = parse_gpu_ids(spec, "--gpus");
  return request;
}

std::vector<std::string> parse_gpu_ids(std::string_view spec, std::string_view option) {
  if (spec.empty()) {
    throw ConfigError(fmt::format("{} needs a list of GPUs, e.g. {}{}0,2", option, option,
                                  !option.empty() && option.back() == '=' ? "" : " "));
  }
  // "--gpus device=" is followed by its list without a space, as the user typed it.
  const std::string given = fmt::format("{}{}{}", option, !option.empty() && option.back() == '=' ? "" : " ", spec);
  std::vector<std::string> ids;
  for (const auto& entry : split(spec, ',')) {
    std::string id(trim(entry));
    if (id.empty()) throw ConfigError(fmt::format("{}: empty entry in the list", given));
    if (std::find(ids.begin(), ids.end(), id) != ids.end()) {
      throw ConfigError(fmt::format("{}: GPU {} is listed twice", given, id));
    }
    ids.push_back(std::move(id));
  }
  return ids;
}

std::string format_gpu_request(const GpuRequest& request) {
  if (request.count) return std::to_string(*request.count);
  // One id that reads as a number would be taken for a count.
  const bool one_number = request.ids.size() == 1 && parse_int(request.ids[0]).has_value();
  return fmt::format("{}{}", one_number ? "device=" : "", fmt::join(request.ids, ","));
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
                                     const std::string& label, const std::optional<std::string>& visible_devices) {
  const std::string listed = available.empty() ? "none" : fmt::format("{}", fmt::join(available, ","));
  if (request.count) {
    if (static_cast<size_t>(*request.count) > available.size()) {
      throw ConfigError(fmt::format("{}: only {} GPU{} available ({}){}", label, available.size(),
                                    available.size() == 1 ? "" : "s",
                                    visible_devices ? "CUDA_VISIBLE_DEVICES=" + *visible_devices : listed,
                                    // Said only where such a GPU is there to be named.
                                    label.rfind("--gpus ", 0) == 0 &&
                                            std::find(available.begin(), available.end(),
                                                      std::to_string(*request.count)) != available.end()
                                        ? fmt::format("; a number alone is a count: GPU {} alone is --gpus device={}",
                                                      *request.count, *request.count)
                                        : std::string()));
    }
    return {available.begin(), available.begin() + *request.count};
  }
  for (const auto& id : request.ids) {
    if (std::find(available.begin(), available.end(), id) != available.end()) continue;
    if (visible_devices) {
      throw ConfigError(fmt::format("{}: GPU {} is not visible: CUDA_VISIBLE_DEVICES={} (unset it to choose among "
                                    "all of this machine's GPUs)",
                                    label, id, *visible_devices));
    }
    throw ConfigError(fmt::format("{}: GPU {} does not exist: this machine has {} GPU{} ({})", label, id,
                                  available.size(), available.size() == 1 ? "" : "s", listed));
  }
  return request.ids;
}

}  // namespace dlrun::launcher
