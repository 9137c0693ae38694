// The GPU path: NCCL groups, DataParallel on CUDA tensors, checkpoints of CUDA models. Skipped
// (reported as skipped) without a CUDA LibTorch, NCCL or a GPU; run on a GPU machine, see
// docs/runtime.md ("GPUs").

#include <torch/cuda.h>
#include <torch/nn/modules/container/sequential.h>
#include <torch/nn/modules/linear.h>
#include <torch/optim/adam.h>
#include <torch/optim/sgd.h>

#include <unistd.h>

#include <filesystem>

#include "dlrun/checkpoint.hpp"
#include "dlrun/data_parallel.hpp"
#include "process_group_factory.hpp"
#include "rank_threads.hpp"
#include "remove_tree.hpp"

// Last, in a block of its own: after every LibTorch header (glog's CHECK).
#include "doctest_after_torch.hpp"

namespace {

bool no_nccl_gpus(int needed) {
  return !dlrun::runtime::nccl_compiled_in() ||
         static_cast<int>(torch::cuda::device_count()) < needed;
}

dlrun::InitOptions nccl_options() {
  dlrun::InitOptions options;
  options.backend = dlrun::Backend::nccl;
  options.handle_signals = false;
  return options;
}

// The same small net on every call (fixed seed), on `device`.
torch::nn::Sequential make_net(const c10::Device& device) {
  torch::manual_seed(3);
  torch::nn::Sequential net(torch::nn::Linear(16, 32), torch::nn::Linear(32, 4));
  net->to(device);
  return net;
}

}  // namespace

TEST_SUITE("runtime::Cuda") {
  TEST_CASE("NCCL, one rank: collectives, gradients as a plain backward, the stop vote" *
            doctest::skip(no_nccl_gpus(1))) {
    dlrun::test::run_ranks(
        1,
        [](dlrun::Context& ctx) {
          CHECK(ctx.backend_name() == "nccl");
          REQUIRE(ctx.device().is_cuda());
          std::vector<double> values{1.5, -2};
          ctx.all_reduce_sum(values);
          CHECK(values == std::vector<double>{1.5, -2});
          CHECK(ctx.broadcast(7) == 7);
          ctx.barrier();

          auto x = torch::randn({8, 16}, torch::TensorOptions().device(ctx.device()));
          auto plain = make_net(ctx.device());
          plain->forward(x).square().mean().backward();
          auto net = make_net(ctx.device());
          dlrun::DataParallel dp(net.ptr(), ctx);
          torch::optim::SGD sgd(net->parameters(), torch::optim::SGDOptions(0.1));
          for (int step = 0; step < 2; ++step) {  // the second rebuilds the buckets
            if (step == 1) {  // compare the gradients of the first step, then step on
              auto p = plain->parameters(), q = net->parameters();
              for (size_t i = 0; i < p.size(); ++i) {
                CHECK(q[i].grad().device() == ctx.device());
                CHECK(torch::allclose(p[i].grad(), q[i].grad(), 1e-5, 1e-6));
              }
            }
            sgd.zero_grad();
            if (step == 1) ctx.request_stop();  // before the backward that carries the vote
            dp.backward(net->forward(x).square().mean());
            dp.step(sgd);
            CHECK(ctx.stop_requested() == (step == 1));
          }
        },
        nccl_options());
  }

  TEST_CASE("NCCL, two ranks on two GPUs: gradients are averaged" * doctest::skip(no_nccl_gpus(2))) {
    std::vector<double> grads(2, 0);
    dlrun::test::run_ranks(
        2,
        [&](dlrun::Context& ctx) {
          CHECK(ctx.device().index() == ctx.rank());
          auto net = make_net(ctx.device());
          dlrun::DataParallel dp(net.ptr(), ctx);
          torch::optim::SGD sgd(net->parameters(), torch::optim::SGDOptions(0.1));
          // Rank r's loss is (r + 1) * sum(outputs): the average gradient is 1.5x rank 0's.
          auto x = torch::ones({4, 16}, torch::TensorOptions().device(ctx.device()));
          dp.backward(net->forward(x).sum() * (ctx.rank() + 1));
          dp.step(sgd);
          grads[ctx.rank()] = net->parameters().back().grad().sum().item<double>();
        },
        nccl_options());
    CHECK(grads[0] == doctest::Approx(grads[1]));
    CHECK(grads[0] == doctest::Approx(1.5 * 4 * 4));  // bias of the last layer: 4 rows x 4 outputs
  }

  TEST_CASE("a checkpoint of a CUDA model and optimizer restores onto the GPU" *
            doctest::skip(no_nccl_gpus(1))) {
    const auto dir = std::filesystem::temp_directory_path() /
                     ("dlrun-cuda-ckpt-" + std::to_string(::getpid()));
    dlrun::runtime::remove_tree(dir);
    dlrun::test::run_ranks(
        1,
        [&](dlrun::Context& ctx) {
          auto net = make_net(ctx.device());
          torch::optim::SGD sgd(net->parameters(), torch::optim::SGDOptions(0.1).momentum(0.9));
          net->forward(torch::ones({2, 16}, torch::TensorOptions().device(ctx.device())))
              .sum()
              .backward();
          sgd.step();
          {
            dlrun::Checkpoint ckpt(ctx, dir);
            ckpt.track("net", net.ptr());
            ckpt.track("sgd", sgd);
            ckpt.save(1);
          }
          torch::manual_seed(9);
          auto other = make_net(ctx.device());
          for (auto& p : other->parameters()) p.data().normal_();
          torch::optim::SGD other_sgd(other->parameters(), torch::optim::SGDOptions(0.1).momentum(0.9));
          dlrun::Checkpoint ckpt(ctx, dir);
          ckpt.track("net", other.ptr());
          ckpt.track("sgd", other_sgd);
          auto info = ckpt.restore();
          REQUIRE(info);
          CHECK(info->step == 1);
          auto p = net->parameters(), q = other->parameters();
          for (size_t i = 0; i < p.size(); ++i) {
            CHECK(q[i].device() == ctx.device());
            CHECK(torch::equal(p[i], q[i]));
          }
        },
        nccl_options());
    dlrun::runtime::remove_tree(dir);
  }

  TEST_CASE("a checkpoint of CPU ranks resumes on the GPU, optimizer state included" *
            doctest::skip(torch::cuda::device_count() < 1)) {
    const auto dir = std::filesystem::temp_directory_path() /
                     ("dlrun-cpu-to-gpu-" + std::to_string(::getpid()));
    dlrun::runtime::remove_tree(dir);
    dlrun::InitOptions cpu;
    cpu.device = dlrun::DeviceKind::cpu;
    cpu.handle_signals = false;
    dlrun::test::run_ranks(
        1,
        [&](dlrun::Context& ctx) {
          const c10::Device gpu(c10::DeviceType::CUDA, 0);
          auto net = make_net(c10::Device(c10::DeviceType::CPU));
          torch::optim::Adam adam(net->parameters(), torch::optim::AdamOptions(1e-3));
          net->forward(torch::ones({2, 16})).sum().backward();
          adam.step();
          {
            dlrun::Checkpoint ckpt(ctx, dir);
            ckpt.track("net", net.ptr());
            ckpt.track("adam", adam);
            ckpt.save(1);
          }
          auto on_gpu = make_net(gpu);
          torch::optim::Adam gpu_adam(on_gpu->parameters(), torch::optim::AdamOptions(1e-3));
          dlrun::Checkpoint ckpt(ctx, dir);
          ckpt.track("net", on_gpu.ptr());
          ckpt.track("adam", gpu_adam);
          REQUIRE(ckpt.restore());
          on_gpu->forward(torch::ones({2, 16}, torch::TensorOptions().device(gpu))).sum().backward();
          gpu_adam.step();  // throws if Adam's restored moments stayed on the CPU
          adam.zero_grad();
          net->forward(torch::ones({2, 16})).sum().backward();
          adam.step();  // the same step on the CPU: the GPU's must match it
          auto p = net->parameters(), q = on_gpu->parameters();
          for (size_t i = 0; i < p.size(); ++i) CHECK(torch::allclose(p[i], q[i].cpu(), 1e-5, 1e-6));
        },
        cpu);
    dlrun::runtime::remove_tree(dir);
  }
}
