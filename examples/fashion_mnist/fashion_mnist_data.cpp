#include "fashion_mnist_data.hpp"

#include <ATen/ATen.h>
#include <fmt/format.h>
#include <zlib.h>

#include <stdexcept>
#include <vector>

namespace fashion_mnist {
namespace {

// Mean and standard deviation of the training images' pixels (scaled to [0, 1]).
constexpr float k_mean = 0.2860f;
constexpr float k_std = 0.3530f;

std::vector<uint8_t> read_gz(const std::string& path) {
  gzFile file = gzopen(path.c_str(), "rb");
  if (!file) {
    throw std::runtime_error(fmt::format(
        "cannot open {}: install Debian's dataset-fashion-mnist or pass --data-dir", path));
  }
  std::vector<uint8_t> out;
  uint8_t buffer[1 << 16];
  int n = 0;
  while ((n = gzread(file, buffer, sizeof buffer)) > 0) out.insert(out.end(), buffer, buffer + n);
  bool failed = n < 0;
  gzclose(file);
  if (failed) throw std::runtime_error(fmt::format("{} is not a readable gzip file", path));
  return out;
}

uint32_t big_endian(const std::vector<uint8_t>& data, size_t offset) {
  return (uint32_t{data[offset]} << 24) | (uint32_t{data[offset + 1]} << 16) |
         (uint32_t{data[offset + 2]} << 8) | uint32_t{data[offset + 3]};
}

// The IDX header: magic (0x0000 0x08 ndims), then ndims sizes. Returns the sizes.
std::vector<int64_t> idx_shape(const std::vector<uint8_t>& data, const std::string& path,
                               uint32_t ndims) {
  if (data.size() < 4 + 4 * ndims || big_endian(data, 0) != (0x0800u | ndims)) {
    throw std::runtime_error(fmt::format("{} is not an IDX file of {} dimension(s)", path, ndims));
  }
  std::vector<int64_t> shape;
  int64_t total = 1;
  for (uint32_t i = 0; i < ndims; ++i) {
    shape.push_back(big_endian(data, 4 + 4 * i));
    total *= shape.back();
  }
  if (data.size() != 4 + 4 * ndims + static_cast<size_t>(total)) {
    throw std::runtime_error(fmt::format("{} is cut short", path));
  }
  return shape;
}

}  // namespace

Split load(const std::string& dir, const std::string& which, int64_t limit) {
  const std::string images_path = fmt::format("{}/{}-images-idx3-ubyte.gz", dir, which);
  const std::string labels_path = fmt::format("{}/{}-labels-idx1-ubyte.gz", dir, which);
  auto images = read_gz(images_path);
  auto labels = read_gz(labels_path);
  auto image_shape = idx_shape(images, images_path, 3);
  auto label_shape = idx_shape(labels, labels_path, 1);
  if (image_shape[0] != label_shape[0]) {
    throw std::runtime_error(fmt::format("{} has {} images but {} has {} labels", images_path,
                                         image_shape[0], labels_path, label_shape[0]));
  }
  int64_t n = image_shape[0];
  if (limit > 0 && limit < n) n = limit;
  Split split;
  split.images =
      at::from_blob(images.data() + 16, {n, 1, image_shape[1], image_shape[2]}, at::kByte)
          .to(at::kFloat)
          .div_(255.0f)
          .sub_(k_mean)
          .div_(k_std);
  split.labels = at::from_blob(labels.data() + 8, {n}, at::kByte).to(at::kLong);
  return split;
}

}  // namespace fashion_mnist
