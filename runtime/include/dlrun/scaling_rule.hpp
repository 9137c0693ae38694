#pragma once
// How the learning rate follows the batch size when dlrun::AdaptiveBatch changes it. The
// learning rate a user gives is the one for the initial batch; each step it is multiplied by
// lr_factor(). With the optimizer, the rule also sets what a step at a larger batch is worth
// (AdaptiveBatch's progress() and its statistical efficiency, goodput/goodput.hpp): with an
// adaptive optimizer (Adam, AdamW, RMSprop, ...) the √scale rules (`adam`, `sqrt`) make a step
// worth √(gain · scale) initial-batch steps; every other pairing, the gain. Pure functions, no
// I/O, no LibTorch. Thread-safe.
//
// gain: the AdaScale gain ratio r = (var + sqr) / (var / scale + sqr), in [1, scale], where
// sqr = |G|² and var = tr(Σ) measured at the initial batch size (docs/adaptive.md).

#include <optional>
#include <string>
#include <string_view>

namespace dlrun {

enum class ScalingRule {
  automatic,  // adascale for SGD-like optimizers, adam for Adam, AdamW and RMSprop
  adascale,   // lr × gain (AdaScale, Johnson et al. 2020); progress += gain
  linear,     // lr × scale (Goyal et al. 2017); progress += gain
  sqrt,       // lr × √scale (Krizhevsky 2014); progress += gain (adaptive optimizers: as adam)
  adam,       // lr × √scale, for adaptive optimizers (Malladi et al. 2022);
              // progress += √(gain · scale) with one, the gain with SGD
  none,       // lr unchanged; progress += gain
};

// The learning-rate multiplier for a batch `scale` times the initial one. `automatic` must be
// resolved first (resolve_rule); passing it throws std::invalid_argument.
double lr_factor(ScalingRule rule, double gain, double scale);

std::string_view to_string(ScalingRule rule);
// "adascale", "linear", "sqrt", "adam", "none", "auto"/"automatic"; nullopt otherwise.
std::optional<ScalingRule> parse_scaling_rule(std::string_view text);

}  // namespace dlrun
