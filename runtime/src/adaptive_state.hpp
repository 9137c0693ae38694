#pragma once
// The text AdaptiveBatch keeps in a checkpoint (state-NAME.txt, docs/checkpoint-format.md):
// a few "key value" lines, then the noise scale's and the throughput profile's own lines, each
// section under a "[name]" header. Pure; throws std::invalid_argument on malformed text.

#include <cstdint>
#include <string>
#include <vector>

namespace dlrun::runtime {

struct AdaptiveState {
  int64_t global_batch = 0;
  int world_size = 1;  // when saved: a restore into another world re-plans
  int64_t step = 0;
  double progress = 0;
  std::vector<double> base_lr;  // per optimizer parameter group
  int64_t batch_cap = 0;        // the largest batch allowed since the loss ran away (0: none)
  // The training loss's last measured fall per second and the goodput the model predicted
  // then (the noise floor's trend, carried over a restart; fall_rate < 0: none measured).
  double fall_rate = -1;
  double fall_goodput = 0;
  std::string noise;            // GradientNoiseScale::serialize()
  std::string profile;          // ThroughputProfile::serialize()
};

std::string format_adaptive_state(const AdaptiveState& state);
AdaptiveState parse_adaptive_state(const std::string& text);

}  // namespace dlrun::runtime
