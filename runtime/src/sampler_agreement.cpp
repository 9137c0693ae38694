#include "sampler_agreement.hpp"

#include <fmt/format.h>

#include <string>
#include <vector>

#include "context_state.hpp"
#include "dlrun/runtime_errors.hpp"

namespace dlrun::runtime {
namespace {

constexpr int k_fields = 3;           // global batch, dataset size, seed
constexpr size_t k_most_named = 8;    // ranks whose values a message lists
constexpr uint64_t k_exact = 1ULL << 52;  // a double holds integers below it exactly

// "rank 0: 128, rank 1: 256" (every rank's value of field `field`, "none" for 0 when `none`).
std::string values_of(const std::vector<double>& all, int world_size, int field, bool none) {
  std::string text;
  for (int rank = 0; rank < world_size && static_cast<size_t>(rank) < k_most_named; ++rank) {
    const auto value = static_cast<long long>(all[static_cast<size_t>(rank * k_fields + field)]);
    text += fmt::format("{}rank {}: {}", rank == 0 ? "" : ", ", rank,
                        none && value == 0 ? std::string("none") : std::to_string(value));
  }
  if (static_cast<size_t>(world_size) > k_most_named) text += ", …";
  return text;
}

}  // namespace

void check_sampler_agreement(Context& context) {
  ContextState& state = context.state();
  if (state.sampler_checked) return;
  state.sampler_checked = true;
  if (!state.group || state.world_size < 2) return;
  const auto& take = state.sampler_take;
  std::vector<double> all(static_cast<size_t>(state.world_size * k_fields), 0.0);
  const size_t mine = static_cast<size_t>(state.rank * k_fields);
  all[mine] = static_cast<double>(take.global_batch);
  all[mine + 1] = static_cast<double>(take.dataset_size);
  all[mine + 2] = static_cast<double>(take.seed % k_exact);
  context.all_reduce_sum(all);
  bool any_took = false;
  bool differs[k_fields] = {false, false, false};
  for (int rank = 0; rank < state.world_size; ++rank) {
    for (int field = 0; field < k_fields; ++field) {
      if (all[static_cast<size_t>(rank * k_fields + field)] != all[static_cast<size_t>(field)]) differs[field] = true;
    }
    any_took = any_took || all[static_cast<size_t>(rank * k_fields)] > 0;
  }
  if (!any_took || !(differs[0] || differs[1] || differs[2])) return;
  std::string message = "the ranks' ElasticSamplers disagree at the first step (samples are lost or trained twice)";
  if (differs[0]) {
    message += fmt::format(": global batch sizes {} (next(B) splits one global batch B among the ranks: give every "
                           "rank the same B)",
                           values_of(all, state.world_size, 0, true));
  }
  if (differs[1]) {
    message += fmt::format("{} dataset sizes {} (every rank sees the whole dataset: the sampler picks each rank's "
                           "share of it)",
                           differs[0] ? ";" : ":", values_of(all, state.world_size, 1, false));
  }
  if (differs[2]) {
    message += fmt::format("{} seeds {} (every rank needs the same seed: it orders the epoch)",
                           differs[0] || differs[1] ? ";" : ":", values_of(all, state.world_size, 2, false));
  }
  throw ConfigError(message);
}

}  // namespace dlrun::runtime
