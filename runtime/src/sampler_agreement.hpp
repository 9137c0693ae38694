#pragma once
// At the first DataParallel step, every rank's ElasticSampler (one made with the Context) must
// have taken the same global batch, of the same dataset size and seed: the sampler splits one
// global batch among the ranks, so a rank that asks for another (a batch size read from a
// per-rank setting, a dataset each rank loads a different part of) loses samples or trains
// them twice without a word, and the ranks later wait for each other for good. One small
// collective, once. Not thread-safe (the training loop's thread).

#include "dlrun/context.hpp"

namespace dlrun::runtime {

// Once per Context: a ConfigError on every rank, naming each rank's values, when they differ.
// Nothing for a world of one, or when no rank's sampler took anything.
void check_sampler_agreement(Context& context);

}  // namespace dlrun::runtime
