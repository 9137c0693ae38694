#include "rank_device.hpp"

#include "dlrun/runtime_errors.hpp"

// Last, in a block of its own: after every LibTorch header (glog's CHECK).
#include "doctest_after_torch.hpp"

using dlrun::DeviceKind;
using dlrun::runtime::choose_cuda_index;
using dlrun::runtime::requested_device;

TEST_SUITE("runtime::RankDevice") {
  TEST_CASE("InitOptions::device wins over DLRUN_DEVICE, which wins over automatic") {
    CHECK(requested_device(DeviceKind::cpu, "cuda") == DeviceKind::cpu);
    CHECK(requested_device(DeviceKind::cuda, "cpu") == DeviceKind::cuda);
    CHECK(requested_device(DeviceKind::automatic, "cpu") == DeviceKind::cpu);
    CHECK(requested_device(DeviceKind::automatic, "cuda") == DeviceKind::cuda);
    CHECK(requested_device(DeviceKind::automatic, "") == DeviceKind::automatic);
  }

  TEST_CASE("one visible GPU per rank is cuda:0, with all visible, local rank i takes GPU i") {
    CHECK(choose_cuda_index(DeviceKind::cuda, 3, 1) == 0);
    CHECK(choose_cuda_index(DeviceKind::automatic, 3, 1) == 0);
    CHECK(choose_cuda_index(DeviceKind::cuda, 3, 4) == 3);
    CHECK(choose_cuda_index(DeviceKind::cuda, 5, 4) == 1);
  }

  TEST_CASE("CPU ranks, and automatic without a GPU, train on the CPU") {
    CHECK(choose_cuda_index(DeviceKind::cpu, 0, 8) == -1);
    CHECK(choose_cuda_index(DeviceKind::automatic, 0, 0) == -1);
  }

  TEST_CASE("a GPU rank that sees no GPU is told why") {
    CHECK_THROWS_AS(choose_cuda_index(DeviceKind::cuda, 0, 0), dlrun::ConfigError);
  }
}
