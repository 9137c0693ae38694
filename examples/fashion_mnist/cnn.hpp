#pragma once
// The example's small CNN (0.2 M parameters), shared with bench/runtime so that the
// benchmark times exactly the model the example trains. Header-only.

#include <torch/nn/functional/activation.h>
#include <torch/nn/functional/pooling.h>
#include <torch/nn/module.h>
#include <torch/nn/modules/conv.h>
#include <torch/nn/modules/linear.h>

namespace fashion_mnist {

struct Cnn : torch::nn::Module {
  torch::nn::Conv2d conv1{nullptr}, conv2{nullptr};
  torch::nn::Linear fc1{nullptr}, fc2{nullptr};
  Cnn() {
    conv1 = register_module("conv1", torch::nn::Conv2d(torch::nn::Conv2dOptions(1, 16, 3).padding(1)));
    conv2 = register_module("conv2", torch::nn::Conv2d(torch::nn::Conv2dOptions(16, 32, 3).padding(1)));
    fc1 = register_module("fc1", torch::nn::Linear(32 * 7 * 7, 128));
    fc2 = register_module("fc2", torch::nn::Linear(128, 10));
  }
  torch::Tensor forward(torch::Tensor x) {
    namespace F = torch::nn::functional;
    x = F::max_pool2d(F::relu(conv1->forward(x)), F::MaxPool2dFuncOptions(2));
    x = F::max_pool2d(F::relu(conv2->forward(x)), F::MaxPool2dFuncOptions(2));
    return fc2->forward(F::relu(fc1->forward(x.flatten(1))));
  }
};

}  // namespace fashion_mnist
