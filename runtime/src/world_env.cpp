#include "world_env.hpp"

#include <fmt/format.h>

#include <charconv>
#include <vector>

#include "dlrun/protocol.hpp"
#include "dlrun/runtime_errors.hpp"

namespace dlrun::runtime {
namespace {

std::string join(const std::vector<std::string>& names) {
  std::string out;
  for (size_t i = 0; i < names.size(); ++i) {
    if (i > 0) out += i + 1 == names.size() ? " and " : ", ";
    out += names[i];
  }
  return out;
}

long long parse_int(const char* name, const char* value, long long low, long long high) {
  long long out = 0;
  std::string_view text(value);
  auto [end, ec] = std::from_chars(text.data(), text.data() + text.size(), out);
  if (ec != std::errc() || end != text.data() + text.size() || out < low || out > high) {
    throw EnvironmentError(
        fmt::format("{}='{}' is not a whole number from {} to {}", name, value, low, high));
  }
  return out;
}

}  // namespace

WorldEnv read_world_env(const EnvLookup& lookup) {
  const char* required[] = {env::k_rank, env::k_world_size, env::k_master_addr, env::k_master_port};
  std::vector<std::string> set, missing;
  for (const char* name : required) {
    const char* value = lookup(name);
    (value != nullptr && *value != '\0' ? set : missing).emplace_back(name);
  }
  WorldEnv world;
  if (const char* v = lookup(env::k_restart_count); v && *v) {
    world.restart_count = static_cast<int>(parse_int(env::k_restart_count, v, 0, 1 << 30));
  }
  if (const char* v = lookup(env::k_run_dir); v) world.run_dir = v;
  if (const char* v = lookup(env::k_checkpoint_dir); v) world.checkpoint_dir = v;
  if (const char* v = lookup(env::k_progress_file); v) world.progress_file = v;
  if (const char* v = lookup(env::k_device); v && *v) {
    world.device = v;
    if (world.device != "cpu" && world.device != "cuda") {
      throw EnvironmentError(
          fmt::format("{}='{}': expected cpu or cuda (or unset)", env::k_device, world.device));
    }
  }
  if (set.empty()) return world;
  if (!missing.empty()) {
    throw EnvironmentError(fmt::format(
        "{} {} set but {} {} not: start the program with `dlrun local` (or torchrun), or set all "
        "of RANK, WORLD_SIZE, MASTER_ADDR and MASTER_PORT; unset them all to run as a world of one",
        join(set), set.size() == 1 ? "is" : "are", join(missing),
        missing.size() == 1 ? "is" : "are"));
  }
  world.world_size =
      static_cast<int>(parse_int(env::k_world_size, lookup(env::k_world_size), 1, 1 << 20));
  world.rank =
      static_cast<int>(parse_int(env::k_rank, lookup(env::k_rank), 0, world.world_size - 1));
  world.master_addr = lookup(env::k_master_addr);
  world.master_port =
      static_cast<uint16_t>(parse_int(env::k_master_port, lookup(env::k_master_port), 1, 65535));
  if (const char* v = lookup(env::k_local_rank); v && *v) {
    world.local_rank = static_cast<int>(parse_int(env::k_local_rank, v, 0, 1 << 20));
  } else {
    world.local_rank = world.rank;
  }
  world.local_world_size = world.world_size;
  if (const char* v = lookup(env::k_local_world_size); v && *v) {
    world.local_world_size =
        static_cast<int>(parse_int(env::k_local_world_size, v, 1, world.world_size));
  }
  return world;
}

}  // namespace dlrun::runtime
