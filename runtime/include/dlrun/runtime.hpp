#pragma once
// dlrun's runtime: the library a training program links to train data-parallel under
// `dlrun local` (and alone, as a world of one). See docs/runtime.md.

namespace dlrun::runtime {

// The dlrun version this library was built from.
const char* version();

}  // namespace dlrun::runtime
