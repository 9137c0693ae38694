#pragma once
// dlrun's runtime: the library a training program links to train data-parallel under
// `dlrun local` (and alone, as a world of one). This header includes the whole public API;
// see docs/runtime.md.
//
//   auto ctx = dlrun::init();
//   dlrun::DataParallel dp(model.ptr(), ctx);
//   dlrun::ElasticSampler sampler(dataset_size, ctx, seed);
//   dlrun::Checkpoint ckpt(ctx, dir);  ckpt.track("model", model.ptr()); ...  ckpt.restore();

#include "dlrun/adaptive_batch.hpp"
#include "dlrun/checkpoint.hpp"
#include "dlrun/context.hpp"
#include "dlrun/data_parallel.hpp"
#include "dlrun/elastic_sampler.hpp"
#include "dlrun/runtime_errors.hpp"
#include "dlrun/scaling_rule.hpp"

namespace dlrun::runtime {

// The dlrun version this library was built from.
const char* version();

}  // namespace dlrun::runtime
