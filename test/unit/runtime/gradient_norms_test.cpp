#include "gradient_norms.hpp"

#include <torch/nn/modules/linear.h>
#include <torch/optim/adam.h>
#include <torch/optim/sgd.h>
#include <torch/utils.h>

// Last, in a block of its own: after every LibTorch header (glog's CHECK).
#include "doctest_after_torch.hpp"

using dlrun::runtime::ParamGroups;
using dlrun::runtime::Preconditioner;

namespace {

double sqr(const at::Tensor& t) {
  return t.pow(2).sum().item<double>();
}

}  // namespace

TEST_SUITE("runtime::GradientNorms") {
  TEST_CASE("squared norms per group, with and without a preconditioner") {
    torch::manual_seed(5);
    torch::nn::Linear a(4, 3), b(3, 2);
    for (auto& p : a->parameters()) p.mutable_grad() = torch::randn_like(p);
    for (auto& p : b->parameters()) p.mutable_grad() = torch::randn_like(p);
    const ParamGroups groups{a->parameters(), b->parameters()};
    const auto norms = dlrun::runtime::grad_sqr_norms(groups);
    REQUIRE(norms.size() == 2);
    CHECK(norms[0] == doctest::Approx(sqr(a->weight.grad()) + sqr(a->bias.grad())));
    CHECK(norms[1] == doctest::Approx(sqr(b->weight.grad()) + sqr(b->bias.grad())));
    Preconditioner halve;
    halve.inverse[a->weight.unsafeGetTensorImpl()] = torch::full_like(a->weight, 0.5);
    const auto scaled = dlrun::runtime::grad_sqr_norms(groups, &halve);
    CHECK(scaled[0] == doctest::Approx(sqr(a->weight.grad()) / 4 + sqr(a->bias.grad())));
    CHECK(scaled[1] == doctest::Approx(norms[1]));
  }

  TEST_CASE("a preconditioned norm is |g x inverse|², whatever the layout, without a copy") {
    torch::manual_seed(7);
    auto param = torch::zeros({3, 5});  // 15 elements: the loop's blocks of 4 and its tail
    Preconditioner pre;
    pre.inverse[param.unsafeGetTensorImpl()] = torch::rand({3, 5}) + 0.5;
    const auto& inv = pre.inverse.begin()->second;
    auto grad = torch::randn({3, 5});
    const double expected = sqr(grad * inv);
    CHECK(pre.sqr_norm(param, grad).item<double>() == doctest::Approx(expected));  // the loop
    auto transposed = torch::randn({5, 3}).t();  // not contiguous: the tensor ops
    CHECK(pre.sqr_norm(param, transposed).item<double>() == doctest::Approx(sqr(transposed * inv)));
    CHECK(pre.sqr_norm(param, grad.to(at::kDouble)).item<double>() == doctest::Approx(expected));
    auto other = torch::zeros({2});  // no inverse: the raw norm
    CHECK(pre.sqr_norm(other, torch::ones({2})).item<double>() == doctest::Approx(2.0));
  }

  TEST_CASE("a refresh of Adam's denominators writes into the tensors of the last one") {
    torch::manual_seed(8);
    torch::nn::Linear model(5, 2);
    torch::optim::Adam adam(model->parameters(), torch::optim::AdamOptions(0.1));
    for (auto& p : model->parameters()) p.mutable_grad() = torch::randn_like(p);
    adam.step();
    Preconditioner pre;
    REQUIRE(pre.update(dlrun::adapt_optimizer(adam)->adam_moments()));
    const void* storage = pre.inverse.at(model->weight.unsafeGetTensorImpl()).data_ptr();
    for (auto& p : model->parameters()) p.mutable_grad() = torch::randn_like(p) * 3;
    adam.step();
    REQUIRE(pre.update(dlrun::adapt_optimizer(adam)->adam_moments()));
    const auto& inv = pre.inverse.at(model->weight.unsafeGetTensorImpl());
    CHECK(inv.data_ptr() == storage);
    // The same values as computed afresh: 1 / (max(√v̂, mean(√v̂) / 10) + ε).
    auto& state = static_cast<torch::optim::AdamParamState&>(
        *adam.state().at(c10::guts::to_string(model->weight.unsafeGetTensorImpl())));
    const double correction = 1 - std::pow(0.999, 2);
    auto root = (state.exp_avg_sq() / correction).sqrt();
    auto fresh = 1 / (torch::maximum(root, root.mean() / 10) + 1e-8);
    CHECK(torch::allclose(inv, fresh, 1e-5, 1e-6));
  }

  TEST_CASE("Adam's denominators, floored at a tenth of their tensor's mean") {
    torch::manual_seed(6);
    torch::nn::Linear model(5, 1);
    torch::optim::Adam adam(model->parameters(), torch::optim::AdamOptions(0.1).eps(1e-8));
    Preconditioner pre;
    CHECK_FALSE(pre.update(dlrun::adapt_optimizer(adam)->adam_moments()));  // no step yet: no state
    auto grad = torch::tensor({{1.0f, 1.0f, 1.0f, 1.0f, 1e-9f}});
    model->weight.mutable_grad() = grad.clone();
    model->bias.mutable_grad() = torch::ones({1});
    adam.step();
    REQUIRE(pre.update(dlrun::adapt_optimizer(adam)->adam_moments()));
    // After one step v̂ = g² (bias-corrected), so √v̂ = |g|: 1 for four elements, 1e-9 for the
    // last, which the floor lifts to a tenth of the mean (0.8 / 10 = 0.08).
    const auto got = pre.apply(model->weight, torch::ones({1, 5}));
    CHECK(got[0][0].item<double>() == doctest::Approx(1.0).epsilon(1e-5));
    CHECK(got[0][4].item<double>() == doctest::Approx(1 / 0.08).epsilon(1e-4));
    torch::optim::SGD sgd(model->parameters(), torch::optim::SGDOptions(0.1));
    CHECK_FALSE(pre.update(dlrun::adapt_optimizer(sgd)->adam_moments()));
    CHECK(pre.inverse.empty());
  }

  TEST_CASE("the momentum gain: how far a gradient moves the parameters, in learning rates") {
    torch::nn::Linear model(3, 1);
    torch::optim::SGD plain(model->parameters(), torch::optim::SGDOptions(0.1));
    CHECK(dlrun::adapt_optimizer(plain)->momentum_gain() == 1.0);
    torch::optim::SGD heavy(model->parameters(), torch::optim::SGDOptions(0.1).momentum(0.9));
    CHECK(dlrun::adapt_optimizer(heavy)->momentum_gain() == doctest::Approx(10.0));
    torch::optim::SGD damped(model->parameters(),
                             torch::optim::SGDOptions(0.1).momentum(0.9).dampening(0.5));
    CHECK(dlrun::adapt_optimizer(damped)->momentum_gain() == doctest::Approx(5.0));
    torch::optim::Adam adam(model->parameters(), torch::optim::AdamOptions(0.1));
    CHECK(dlrun::adapt_optimizer(adam)->momentum_gain() == 1.0);  // an average, not a sum
  }

  TEST_CASE("a world of one compares each step's gradient with the previous one") {
    torch::nn::Linear model(2, 1);
    const ParamGroups groups{model->parameters()};
    dlrun::runtime::PreviousGradients previous;
    std::vector<double> local, total;
    model->weight.mutable_grad() = torch::tensor({{1.0f, 2.0f}});
    model->bias.mutable_grad() = torch::tensor({0.0f});
    CHECK_FALSE(previous.measure(groups, nullptr, local, total));  // nothing to compare yet
    model->weight.mutable_grad() = torch::tensor({{3.0f, 0.0f}});
    REQUIRE(previous.measure(groups, nullptr, local, total));
    CHECK(local[0] == doctest::Approx((5.0 + 9.0) / 2));
    CHECK(total[0] == doctest::Approx(4.0 + 1.0));  // |(1,2)+(3,0)|² / 4 = (16 + 4) / 4
    previous.reset();
    CHECK_FALSE(previous.measure(groups, nullptr, local, total));
  }

  TEST_CASE("a world of one compares the two halves of a step's batch, at the same weights") {
    torch::nn::Linear model(2, 1);
    const ParamGroups groups{model->parameters()};
    dlrun::runtime::HalfGradients halves;
    std::vector<double> local, total;
    double batch = 0;
    CHECK_FALSE(halves.measure(groups, nullptr, 2, 2, local, total, batch));  // no half kept
    // The loss is the sum over the samples × 1/4: after the first half (2 samples, mean
    // gradient (2, 4)) the weight's gradient is (1, 2); the second half's mean is (6, 0).
    model->weight.mutable_grad() = torch::tensor({{1.0f, 2.0f}});
    model->bias.mutable_grad() = torch::tensor({0.0f});
    halves.keep(groups);
    CHECK(halves.kept());
    model->weight.mutable_grad() = torch::tensor({{4.0f, 2.0f}});  // + (6, 0) × 2/4
    REQUIRE(halves.measure(groups, nullptr, 2, 2, local, total, batch));
    CHECK(local[0] == doctest::Approx((4.0 + 16.0 + 36.0) / 2));  // (|(2,4)|² + |(6,0)|²) / 2
    CHECK(total[0] == doctest::Approx(16.0 + 4.0));               // |(4,2)|²
    CHECK(batch == doctest::Approx(2.0));
    CHECK_FALSE(halves.kept());  // one measurement per kept half
    // Unequal halves (1 and 3 samples): each half's mean from its share of the sum, and the
    // harmonic mean size 2·1·3/4.
    model->weight.mutable_grad() = torch::tensor({{1.0f, 0.0f}});  // the first half: (4, 0) × 1/4
    halves.keep(groups);
    model->weight.mutable_grad() = torch::tensor({{1.0f, 3.0f}});  // the rest: (0, 4) × 3/4
    REQUIRE(halves.measure(groups, nullptr, 1, 3, local, total, batch));
    CHECK(local[0] == doctest::Approx((16.0 + 16.0) / 2));
    CHECK(total[0] == doctest::Approx(10.0));
    CHECK(batch == doctest::Approx(1.5));
  }
}
