#include "dlrun/context.hpp"

#include "dlrun/runtime_errors.hpp"
#include "process_group_factory.hpp"
#include "rank_threads.hpp"

// Last, in a block of its own: after every LibTorch header (glog's CHECK).
#include "doctest_after_torch.hpp"

TEST_SUITE("runtime::Context") {
  TEST_CASE("collectives over ranks as threads") {
    std::vector<double> sums(4, 0);
    std::vector<int64_t> broadcasts(4, 0);
    dlrun::test::run_ranks(4, [&](dlrun::Context& ctx) {
      CHECK(ctx.world_size() == 4);
      CHECK(ctx.backend_name() == "gloo");
      std::vector<double> values{1.0, static_cast<double>(ctx.rank())};
      ctx.all_reduce_sum(values);
      sums[ctx.rank()] = values[1];
      broadcasts[ctx.rank()] = ctx.broadcast(100 + ctx.rank());
      ctx.barrier();
      CHECK_FALSE(ctx.poll_stop());
      if (ctx.rank() == 1) ctx.request_stop();
      CHECK(ctx.poll_stop());
      CHECK(ctx.exit_code() == 75);
    });
    CHECK(sums == std::vector<double>{6, 6, 6, 6});
    CHECK(broadcasts == std::vector<int64_t>{100, 100, 100, 100});
  }

  TEST_CASE("without dlrun's environment init() is a world of one") {
    for (const char* name : {"RANK", "WORLD_SIZE", "MASTER_ADDR", "MASTER_PORT"}) ::unsetenv(name);
    dlrun::InitOptions options;
    options.handle_signals = false;
    auto ctx = dlrun::init(options);
    CHECK(ctx.rank() == 0);
    CHECK(ctx.world_size() == 1);
    CHECK(ctx.backend_name() == "none");
    std::vector<double> v{2.5};
    ctx.all_reduce_sum(v);
    CHECK(v[0] == 2.5);
    CHECK_FALSE(ctx.poll_stop());
    CHECK(ctx.exit_code() == 0);
  }

  TEST_CASE("a rank that cannot reach the store fails within the timeout, naming it") {
    ::setenv("RANK", "1", 1);
    ::setenv("WORLD_SIZE", "2", 1);
    ::setenv("MASTER_ADDR", "127.0.0.1", 1);
    ::setenv("MASTER_PORT", "9", 1);  // discard: nothing listens
    dlrun::InitOptions options;
    options.handle_signals = false;
    options.rendezvous_timeout = std::chrono::milliseconds(1500);
    std::string message;
    try {
      dlrun::init(options);
    } catch (const dlrun::Error& e) {
      message = e.what();
    }
    for (const char* name : {"RANK", "WORLD_SIZE", "MASTER_ADDR", "MASTER_PORT"}) ::unsetenv(name);
    CHECK(message.rfind("rank 1 could not reach the store at 127.0.0.1:9 within 1.5 s", 0) == 0);
  }
}

TEST_SUITE("runtime::ProcessGroupFactory") {
  TEST_CASE("asking for NCCL without a CUDA/NCCL build says how to get one" *
            doctest::skip(dlrun::runtime::nccl_compiled_in())) {
    auto store = c10::make_intrusive<c10d::HashStore>();
    dlrun::InitOptions options;
    options.backend = dlrun::Backend::nccl;
    CHECK_THROWS_WITH_AS(dlrun::runtime::make_context(store, 0, 1, options),
                         "the NCCL backend was asked for, but this dlrun runtime was built without "
                         "CUDA/NCCL: rebuild against a CUDA LibTorch with NCCL installed, or use "
                         "Backend::gloo",
                         dlrun::ConfigError);
  }
}
