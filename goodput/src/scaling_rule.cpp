#include "dlrun/scaling_rule.hpp"

#include <algorithm>
#include <cmath>
#include <stdexcept>
#include <string>

namespace dlrun {

double lr_factor(ScalingRule rule, double gain, double scale) {
  switch (rule) {
    case ScalingRule::adascale:
      return gain;
    case ScalingRule::linear:
      return scale;
    // The same rate; adam also measures the noise scale through Adam's √v̂.
    case ScalingRule::sqrt:
    case ScalingRule::adam:
      return std::sqrt(scale);
    case ScalingRule::none:
      return 1.0;
    case ScalingRule::automatic:
      break;
  }
  // The optimizer decides what `automatic` means; only the caller knows which one it is.
  throw std::invalid_argument(
      "lr_factor: the scaling rule 'auto' must be resolved to a concrete rule (adascale, "
      "linear, sqrt, adam or none) before the learning rate is scaled");
}

std::string_view to_string(ScalingRule rule) {
  switch (rule) {
    case ScalingRule::automatic:
      return "auto";
    case ScalingRule::adascale:
      return "adascale";
    case ScalingRule::linear:
      return "linear";
    case ScalingRule::sqrt:
      return "sqrt";
    case ScalingRule::adam:
      return "adam";
    case ScalingRule::none:
      return "none";
  }
  return "unknown";
}

std::optional<ScalingRule> parse_scaling_rule(std::string_view text) {
  if (text == "auto" || text == "automatic") return ScalingRule::automatic;
  for (ScalingRule rule : {ScalingRule::adascale, ScalingRule::linear, ScalingRule::sqrt,
                           ScalingRule::adam, ScalingRule::none}) {
    if (text == to_string(rule)) return rule;
  }
  return std::nullopt;
}

}  // namespace dlrun
