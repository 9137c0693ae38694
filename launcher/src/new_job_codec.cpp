#include "dlrun/launcher/new_job_codec.hpp"

#include <charconv>
#include <vector>

#include <fmt/format.h>

#include "dlrun/launcher/text.hpp"

namespace dlrun::launcher {
namespace {

constexpr std::string_view k_magic = "dlrun-job-2";
constexpr std::string_view k_end = "end";

void put(std::string& out, std::string_view field) {
  out += std::to_string(field.size());
  out += ':';
  out += field;
}

std::optional<std::string_view> take(std::string_view& in) {
  size_t colon = in.find(':');
  if (colon == std::string_view::npos || colon == 0 || colon > 12) return std::nullopt;
  size_t size = 0;
  auto [end, ec] = std::from_chars(in.data(), in.data() + colon, size);
  if (ec != std::errc() || end != in.data() + colon || in.size() - colon - 1 < size) return std::nullopt;
  std::string_view field = in.substr(colon + 1, size);
  in.remove_prefix(colon + 1 + size);
  return field;
}

}  // namespace

std::string encode_new_job(const NewJob& job) {
  std::string out;
  for (std::string_view field :
       {k_magic, std::string_view(job.name), std::string_view(job.spec_text), std::string_view(job.spec_path),
        std::string_view(job.base_dir), std::string_view(job.environment)}) {
    put(out, field);
  }
  const auto& r = job.request;
  std::string ids;
  for (const auto& id : r.gpu_ids) ids += (ids.empty() ? "" : ",") + id;
  for (const std::string& field :
       {std::to_string(r.uses_gpus), std::to_string(r.min_ranks), std::to_string(r.max_ranks), ids,
        std::to_string(r.remote), std::to_string(job.slurm), std::to_string(job.owner_uid),
        std::to_string(r.goodput)}) {
    put(out, field);
  }
  put(out, k_end);
  return out;
}

std::optional<NewJob> decode_new_job(std::string_view in) {
  std::vector<std::string_view> fields;
  while (!in.empty()) {
    auto field = take(in);
    if (!field) return std::nullopt;
    fields.push_back(*field);
  }
  if (fields.size() != 15 || fields.front() != k_magic || fields.back() != k_end) return std::nullopt;
  NewJob job;
  job.name = fields[1];
  job.spec_text = fields[2];
  job.spec_path = fields[3];
  job.base_dir = fields[4];
  job.environment = fields[5];
  auto number = [&](size_t i) { return parse_int(fields[i]); };
  auto uses_gpus = number(6), min = number(7), max = number(8), remote = number(10), slurm = number(11),
       owner = number(12), goodput = number(13);
  if (!uses_gpus || !min || !max || !remote || !slurm || !owner || !goodput) return std::nullopt;
  job.request.uses_gpus = *uses_gpus != 0;
  job.request.min_ranks = *min;
  job.request.max_ranks = *max;
  for (auto& id : split(fields[9], ',')) {
    if (!id.empty()) job.request.gpu_ids.push_back(id);
  }
  job.request.remote = *remote != 0;
  job.slurm = *slurm != 0;
  job.owner_uid = *owner;
  job.request.goodput = *goodput != 0;
  return job;
}

}  // namespace dlrun::launcher
