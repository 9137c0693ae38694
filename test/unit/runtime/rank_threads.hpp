#pragma once
// Ranks as threads: runs body(context) on world_size threads over one in-memory HashStore,
// and rethrows the first exception. For the runtime's multi-rank unit tests.

#include <exception>
#include <functional>
#include <mutex>
#include <thread>
#include <torch/csrc/distributed/c10d/HashStore.hpp>
#include <vector>

#include "context_state.hpp"

namespace dlrun::test {

inline void run_ranks(int world_size, const std::function<void(Context&)>& body,
                      const InitOptions& options = {}) {
  auto store = c10::make_intrusive<c10d::HashStore>();
  std::exception_ptr failure;
  std::mutex mutex;
  std::vector<std::thread> threads;
  for (int r = 0; r < world_size; ++r) {
    threads.emplace_back([&, r] {
      try {
        Context context = runtime::make_context(store, r, world_size, options);
        body(context);
      } catch (...) {
        std::lock_guard<std::mutex> lock(mutex);
        if (!failure) failure = std::current_exception();
      }
    });
  }
  for (auto& t : threads) t.join();
  if (failure) std::rethrow_exception(failure);
}

}  // namespace dlrun::test
