#pragma once
// A GPU-like cost the examples sleep: examples/synthetic sleeps it instead of computing, so
// that many simulated GPUs fit on a few cores, and examples/fashion_mnist can sleep it on top
// of its real compute (--step-ms, --sample-ms), so that AdaptiveBatch times steps that behave
// like a GPU's: a fixed cost per optimizer step (kernel launches, the optimizer), a cost per
// sample of the rank's local batch, and a gradient synchronisation that grows with the number
// of ranks.
//
//   one optimizer step on one rank = step_ms + sample_ms × local samples
//                                    + sync_ms_per_rank × (world size − 1)
//
// The per-sample part is paid by each micro-batch before its backward; the fixed and the
// sync parts by the step's last micro-batch, the one whose gradients are reduced. Pure, plus
// sleep_ms; thread-safe.

#include <cstdint>

namespace examples {

struct StepCost {
  double step_ms = 0;
  double sample_ms = 0;
  double sync_ms_per_rank = 0;

  // Milliseconds of one micro-batch of `samples` samples; `last`: the step's last micro-batch.
  double micro_batch_ms(int64_t samples, bool last, int world_size) const;
};

// Sleeps this many milliseconds (nothing for <= 0).
void sleep_ms(double milliseconds);

}  // namespace examples
