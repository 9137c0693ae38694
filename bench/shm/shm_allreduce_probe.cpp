// The shared-memory allreduce alone (runtime/src/shm_allreduce.cpp, no LibTorch): two
// processes sum N floats 300 times; rank 0 prints the median and the 10th/90th percentiles.
// Built and run by bench/shm/run.sh.
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <vector>

#include "shm_allreduce.hpp"

using dlrun::runtime::ShmAllreduce;

int main(int argc, char** argv) {
  const size_t n = argc > 1 ? std::strtoul(argv[1], nullptr, 10) : 203530;
  const std::string name = "/dlrun-bench-" + std::to_string(::getpid());
  auto created = ShmAllreduce::create(name, 2, size_t{2} << 20);
  const pid_t child = ::fork();
  const int rank = child == 0 ? 1 : 0;
  std::unique_ptr<ShmAllreduce> opened;
  if (rank == 1) opened = ShmAllreduce::open(name, 2);
  ShmAllreduce& shm = rank == 1 ? *opened : *created;
  shm.join(rank);
  std::vector<float> data(n, 1.0f);
  std::vector<double> ms;
  for (int i = 0; i < 300; ++i) {
    const auto start = std::chrono::steady_clock::now();
    shm.allreduce(data.data(), n, 0.5f);
    ms.push_back(std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - start).count());
  }
  std::sort(ms.begin(), ms.end());
  if (rank == 0) {
    std::printf("shm allreduce %zu floats (%.1f MB), 2 ranks: median %.3f ms (p10 %.3f, p90 %.3f)\n", n,
                n * 4.0 / 1e6, ms[150], ms[30], ms[270]);
    created->unlink();
    ::waitpid(child, nullptr, 0);
  }
  return 0;
}
