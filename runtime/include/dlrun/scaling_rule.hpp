#pragma once
// How the learning rate follows the batch size when dlrun::AdaptiveBatch changes it, and how
// much "progress" one step at a larger batch is worth. The learning rate a user gives is the
// one for the initial batch; each step it is multiplied by lr_factor(). Progress counts
// scale-invariant steps: one step at the initial batch adds 1, a larger batch adds its gain,
// so learning-rate schedules and "epochs" written against the initial batch keep their
// meaning when the batch size changes. Pure functions, no I/O, no LibTorch. Thread-safe.
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
  sqrt,       // lr × √scale (Krizhevsky 2014); progress += gain
  adam,       // lr × √gain: square-root scaling of the gain, for adaptive optimizers
  none,       // lr unchanged; progress += gain
};

// The learning-rate multiplier for a batch `scale` times the initial one. `automatic` must be
// resolved first (resolve_rule); passing it throws std::invalid_argument.
double lr_factor(ScalingRule rule, double gain, double scale);
// Scale-invariant progress of one step with this gain (the gain itself, at least 1).
double progress_increment(double gain);

std::string_view to_string(ScalingRule rule);
// "adascale", "linear", "sqrt", "adam", "none", "auto"/"automatic"; nullopt otherwise.
std::optional<ScalingRule> parse_scaling_rule(std::string_view text);

}  // namespace dlrun
