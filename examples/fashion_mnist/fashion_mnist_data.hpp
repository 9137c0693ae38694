#pragma once
// Fashion-MNIST from its gzipped IDX files (as Debian's dataset-fashion-mnist installs them):
// images as a float tensor [N, 1, 28, 28], normalised, and labels as int64 [N].

#include <ATen/Tensor.h>

#include <string>

namespace fashion_mnist {

struct Split {
  at::Tensor images;
  at::Tensor labels;
  int64_t size() const { return labels.size(0); }
};

// which: "train" or "t10k". limit > 0 keeps the first `limit` samples. Throws
// std::runtime_error naming the file when it is missing or malformed.
Split load(const std::string& dir, const std::string& which, int64_t limit = 0);

}  // namespace fashion_mnist
