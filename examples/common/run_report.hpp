#pragma once
// What the training examples say about their run, worded once so that every example reads
// the same and the tests' patterns fit them all: where checkpoints go, the lines rank 0 prints
// on a resume and a stop, the adaptive batch's summary, and main()'s one catch. Printing
// happens on the training thread only; rank 0 prints, the other ranks stay quiet.

#include <cstdint>
#include <functional>
#include <string>

#include "dlrun/runtime.hpp"

namespace examples {

// `option` when given, else the job's (ctx.checkpoint_dir(): $DLRUN_CHECKPOINT_DIR, else
// $DLRUN_RUN_DIR/checkpoints), else "" (a run without dlrun and without --checkpoint-dir keeps
// no checkpoints).
std::string checkpoint_dir(const std::string& option, const dlrun::Context& ctx);

// Rank 0, flushed at once (a watcher of a pipe sees it):
// "resumed from step S (epoch E, sample P of N<extra>) saved by W rank(s); now V rank(s)".
void print_resumed(const dlrun::Context& ctx, const dlrun::CheckpointInfo& info,
                   const dlrun::ElasticSampler& sampler, const std::string& extra = "");

// Rank 0: "stopped after step S (epoch E, sample P of N): checkpoint saved, exit C".
void print_stopped(const dlrun::Context& ctx, int64_t step, const dlrun::ElasticSampler& sampler);

// ", batch G (M x A per rank), noise scale X, lr xF": the shape and what decided it.
std::string adaptive_summary(const dlrun::AdaptiveBatch& adaptive);

// main()'s body, with its one catch: an exception becomes "PROGRAM: error: WHAT" on stderr
// and the exit code (a dlrun::Error's own, 1 for anything else).
int run_main(const char* program, const std::function<int()>& body);

}  // namespace examples
