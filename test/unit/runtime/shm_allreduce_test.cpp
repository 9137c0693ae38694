#include "shm_allreduce.hpp"

#include <doctest/doctest.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cmath>
#include <string>
#include <thread>
#include <vector>

#include "dlrun/runtime_errors.hpp"

using dlrun::runtime::ShmAllreduce;

namespace {

std::string unique_name(const char* what) {
  static int counter = 0;
  return "/dlrun-test-" + std::to_string(::getpid()) + "-" + what + std::to_string(counter++);
}

// world ranks as threads, each reducing `count` floats (rank r holds r + i / 1000) twice.
std::vector<std::vector<float>> reduce_in_threads(int world, size_t count, size_t chunk,
                                                  float scale) {
  const std::string name = unique_name("sum");
  auto first = ShmAllreduce::create(name, world, chunk);
  std::vector<std::unique_ptr<ShmAllreduce>> ranks;
  ranks.push_back(std::move(first));
  for (int r = 1; r < world; ++r) ranks.push_back(ShmAllreduce::open(name, world));
  ranks[0]->unlink();
  std::vector<std::vector<float>> data(world, std::vector<float>(count));
  std::vector<std::thread> threads;
  for (int r = 0; r < world; ++r) {
    threads.emplace_back([&, r] {
      ranks[r]->join(r);
      for (size_t i = 0; i < count; ++i) data[r][i] = static_cast<float>(r) + i / 1000.0f;
      ranks[r]->allreduce(data[r].data(), count, scale);
      ranks[r]->allreduce(data[r].data(), count, 1.0f);  // a second call reuses the buffers
    });
  }
  for (auto& t : threads) t.join();
  return data;
}

}  // namespace

TEST_SUITE("runtime::ShmAllreduce") {
  TEST_CASE("every rank gets the same sum, across chunk boundaries, scaled") {
    for (int world : {2, 3, 5}) {
      CAPTURE(world);
      const size_t count = 2500;  // chunks of 1000: two full ones and a short one
      auto data = reduce_in_threads(world, count, 1000, 1.0f / static_cast<float>(world));
      const float rank_sum = static_cast<float>(world * (world - 1) / 2);
      for (int r = 0; r < world; ++r) {
        CAPTURE(r);
        for (size_t i : {size_t{0}, size_t{999}, size_t{1000}, size_t{2499}}) {
          // First call: mean over ranks; second: world × that mean.
          const float want =
              (rank_sum / static_cast<float>(world) + i / 1000.0f) * static_cast<float>(world);
          CHECK(data[r][i] == doctest::Approx(want).epsilon(1e-5));
        }
        CHECK(data[r] == data[0]);  // bit for bit
      }
    }
  }

  TEST_CASE("an unlinked segment cannot be opened, and names say what failed") {
    const std::string name = unique_name("gone");
    auto shm = ShmAllreduce::create(name, 2, 16);
    shm->unlink();
    CHECK_THROWS_WITH_AS(
        ShmAllreduce::open(name, 2),
        ("cannot open shared memory " + name + ": No such file or directory").c_str(),
        dlrun::CommunicationError);
    const std::string other = unique_name("size");
    auto three = ShmAllreduce::create(other, 3, 16);
    CHECK_THROWS_WITH_AS(ShmAllreduce::open(other, 2),
                         ("shared memory " + other + " is not a 2-rank segment").c_str(),
                         dlrun::CommunicationError);
    three->unlink();
  }

  TEST_CASE("a rank whose process died is named instead of waited for") {
    const std::string name = unique_name("dead");
    auto shm = ShmAllreduce::create(name, 2, 16);
    const pid_t child = ::fork();
    if (child == 0) {
      auto peer = ShmAllreduce::open(name, 2);
      peer->join(1);
      ::_exit(0);  // gone before the allreduce
    }
    int status = 0;
    ::waitpid(child, &status, 0);
    shm->unlink();
    shm->join(0);
    shm->set_timeout(std::chrono::seconds(20));
    std::vector<float> data(8, 1.0f);
    const auto start = std::chrono::steady_clock::now();
    CHECK_THROWS_WITH_AS(shm->allreduce(data.data(), data.size()),
                         ("rank 0: rank 1 (pid " + std::to_string(child) +
                          ") exited in the middle of a gradient allreduce")
                             .c_str(),
                         dlrun::CommunicationError);
    CHECK(std::chrono::steady_clock::now() - start < std::chrono::seconds(10));
  }

  TEST_CASE("without the other ranks the allreduce times out, saying so") {
    const std::string name = unique_name("late");
    auto shm = ShmAllreduce::create(name, 2, 16);
    shm->unlink();
    shm->join(0);
    shm->set_timeout(std::chrono::milliseconds(200));
    std::vector<float> data(8, 1.0f);
    CHECK_THROWS_WITH_AS(
        shm->allreduce(data.data(), data.size()),
        "rank 0: the gradient allreduce timed out after 0.2 s waiting for the other ranks",
        dlrun::CommunicationError);
  }

  TEST_CASE("a segment larger than /dev/shm can hold is refused up front, and leaves nothing") {
    const std::string name = unique_name("huge");
    // 2^40 floats per slot: 4 TiB × 4 slots. posix_fallocate fails; ftruncate alone would not.
    CHECK_THROWS_AS(ShmAllreduce::create(name, 2, size_t{1} << 40), dlrun::CommunicationError);
    try {
      ShmAllreduce::create(name, 2, size_t{1} << 40);
    } catch (const dlrun::CommunicationError& e) {
      CHECK(std::string(e.what()).find("cannot size shared memory " + name) == 0);
      CHECK(std::string(e.what()).find("(is /dev/shm full?)") != std::string::npos);
    }
    CHECK_THROWS_AS(ShmAllreduce::open(name, 2), dlrun::CommunicationError);  // unlinked
  }
}
