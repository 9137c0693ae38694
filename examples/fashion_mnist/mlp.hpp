#pragma once
// The example's small MLP, 784-256-10 (0.2 M parameters): a model whose step is mostly fixed
// per-step cost on a CPU, so that larger batches train faster per sample (the case where
// AdaptiveBatch's larger batches pay, docs/adaptive.md). Shared with bench/runtime, which times
// exactly this model. Header-only.

#include <torch/nn/modules/activation.h>
#include <torch/nn/modules/container/sequential.h>
#include <torch/nn/modules/linear.h>

namespace fashion_mnist {

struct Mlp : torch::nn::Module {
  torch::nn::Sequential layers;
  Mlp()
      : layers(register_module("layers",
                               torch::nn::Sequential(torch::nn::Linear(784, 256), torch::nn::ReLU(),
                                                     torch::nn::Linear(256, 10)))) {}
  torch::Tensor forward(torch::Tensor x) { return layers->forward(x.flatten(1)); }
};

}  // namespace fashion_mnist
