#include "dlrun/checkpoint.hpp"

#include <torch/nn/module.h>
#include <torch/nn/modules/linear.h>
#include <torch/optim/adam.h>
#include <torch/optim/sgd.h>
#include <fcntl.h>
#include <sys/resource.h>
#include <torch/utils.h>
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <csignal>
#include <cstdlib>

#include <filesystem>
#include <fstream>
#include <mutex>
#include <thread>

#include "dlrun/data_parallel.hpp"
#include "dlrun/elastic_sampler.hpp"
#include "dlrun/log.hpp"
#include "dlrun/runtime_errors.hpp"
#include "rank_threads.hpp"
#include "remove_tree.hpp"

// Last, in a block of its own: after every LibTorch header (glog's CHECK).
#include "doctest_after_torch.hpp"

namespace fs = std::filesystem;

namespace {

struct TempDir {
  fs::path path;
  TempDir() {
    path = fs::temp_directory_path() /
           ("dlrun-ckpt-" + std::to_string(::getpid()) + "-" + std::to_string(std::rand()));
  }
  ~TempDir() {
    std::error_code ignored;
    dlrun::runtime::remove_tree(path, ignored);
  }
};

dlrun::Context solo() {
  dlrun::InitOptions options;
  options.handle_signals = false;
  return dlrun::init(options);
}

struct Run {
  std::shared_ptr<torch::nn::LinearImpl> model;
  std::unique_ptr<torch::optim::Adam> adam;
  dlrun::ElasticSampler sampler{50, 0, 1, 3};
  explicit Run(uint64_t seed) {
    static std::mutex mutex;  // the default generator is process-wide
    std::lock_guard<std::mutex> lock(mutex);
    torch::manual_seed(seed);
    model = std::make_shared<torch::nn::LinearImpl>(4, 2);
    adam =
        std::make_unique<torch::optim::Adam>(model->parameters(), torch::optim::AdamOptions(0.1));
  }
  void train_step() {
    adam->zero_grad();
    model->forward(torch::ones({3, 4})).pow(2).sum().backward();
    adam->step();
    sampler.next(8);
  }
  void track(dlrun::Checkpoint& ckpt) {
    ckpt.track("model", model);
    ckpt.track("adam", *adam);
    ckpt.track(sampler);
  }
};

}  // namespace

TEST_SUITE("runtime::Checkpoint") {
  TEST_CASE("restore gives back model, optimizer, sampler, step and values") {
    TempDir dir;
    Run first(1);
    dlrun::Checkpoint ckpt(solo(), dir.path);
    first.track(ckpt);
    CHECK_FALSE(ckpt.restore().has_value());
    for (int i = 0; i < 3; ++i) first.train_step();
    // A subnormal value (std::stod refused it on reading: the checkpoint could not be loaded),
    // infinities and NaN come back as they were.
    ckpt.save(3, {{"loss", 0.125}, {"tiny", 1e-310}, {"least", 4.9406564584124654e-324},
                  {"diverged", std::numeric_limits<double>::infinity()},
                  {"nan", std::numeric_limits<double>::quiet_NaN()}});

    Run second(2);
    dlrun::Checkpoint again(solo(), dir.path);
    second.track(again);
    auto info = again.restore();
    REQUIRE(info.has_value());
    CHECK(info->step == 3);
    CHECK(info->values.at("loss") == 0.125);
    CHECK(info->values.at("tiny") == 1e-310);
    CHECK(info->values.at("least") == 4.9406564584124654e-324);
    CHECK(info->values.at("diverged") == std::numeric_limits<double>::infinity());
    CHECK(std::isnan(info->values.at("nan")));
    CHECK(info->saved_world_size == 1);
    CHECK(second.sampler.position() == 24);
    CHECK(torch::equal(second.model->weight, first.model->weight));
    // The optimizer's moments came back too: the next step is identical.
    first.train_step();
    second.train_step();
    CHECK(torch::equal(second.model->weight, first.model->weight));
  }

  TEST_CASE("two objects of a kind under one name, a negative step and no directory are refused") {
    TempDir dir;
    Run run(1);
    dlrun::Checkpoint ckpt(solo(), dir.path);
    ckpt.track("model", run.model);
    // One file per name: a restore loaded the second module's weights into both.
    CHECK_THROWS_WITH_AS(ckpt.track("model", std::make_shared<torch::nn::LinearImpl>(4, 2)),
                         "Checkpoint::track: a module named 'model' is tracked already (one file per name: give "
                         "each its own)",
                         dlrun::ConfigError);
    ckpt.track("model", *run.adam);  // an optimizer's file is another: allowed
    CHECK_THROWS_WITH_AS(ckpt.save(-3), "Checkpoint::save: the step must be 0 or more, not -3", dlrun::ConfigError);
    CHECK_THROWS_WITH_AS(ckpt.save(1, {{"a.b", 1.0}}),
                         "Checkpoint::save (a value's name): 'a.b' is not a valid name (use letters, digits, '_' "
                         "and '-')",
                         dlrun::ConfigError);
    CHECK_THROWS_AS(dlrun::Checkpoint(solo(), ""), dlrun::ConfigError);
  }

  TEST_CASE("keeps the last K and falls back from a damaged checkpoint") {
    TempDir dir;
    Run run(1);
    dlrun::CheckpointOptions options;
    options.keep_last = 2;
    dlrun::Checkpoint ckpt(solo(), dir.path, options);
    run.track(ckpt);
    for (int step = 1; step <= 4; ++step) {
      run.train_step();
      ckpt.save(step);
    }
    auto kept = dlrun::Checkpoint::list(dir.path);
    REQUIRE(kept.size() == 2);
    CHECK(kept[0].filename() == "step-000000000004");
    CHECK(kept[1].filename() == "step-000000000003");
    // A crash half-way through a save leaves only a temporary directory: never loaded.
    fs::create_directories(dir.path / ".tmp-step-000000000005.123");
    {
      std::ofstream damage(kept[0] / "module-model.pt",
                           std::ios::binary | std::ios::in | std::ios::out);
      damage.seekp(40);
      damage.put('\x7f');
    }
    Run other(5);
    dlrun::Checkpoint again(solo(), dir.path, options);
    other.track(again);
    auto info = again.restore();
    REQUIRE(info.has_value());
    CHECK(info->step == 3);
  }

  TEST_CASE("every damaged checkpoint is an error, not a fresh start") {
    TempDir dir;
    Run run(1);
    dlrun::Checkpoint ckpt(solo(), dir.path);
    run.track(ckpt);
    ckpt.save(1);
    fs::remove(dir.path / "step-000000000001" / "MANIFEST");
    CHECK_THROWS_AS(ckpt.restore(), dlrun::CheckpointError);
  }

  TEST_CASE("a write that fails half-way is a CheckpointError, not an abort, and leaves nothing") {
    // A full disk: LibTorch's archive writer threw from its destructor, std::terminate ended
    // rank 0 with SIGABRT and the temporary directory stayed. A file size limit fails the
    // same writes (EFBIG) without a disk of its own.
    TempDir dir;
    Run run(1);
    auto big = std::make_shared<torch::nn::LinearImpl>(256, 256);  // 257 KiB of parameters
    dlrun::Checkpoint ckpt(solo(), dir.path);
    run.track(ckpt);
    ckpt.track("big", big);
    struct rlimit before {};
    REQUIRE(::getrlimit(RLIMIT_FSIZE, &before) == 0);
    auto* previous = std::signal(SIGXFSZ, SIG_IGN);
    struct rlimit limited = before;
    limited.rlim_cur = 64 * 1024;
    REQUIRE(::setrlimit(RLIMIT_FSIZE, &limited) == 0);
    std::string message;
    try {
      ckpt.save(1);
    } catch (const dlrun::CheckpointError& e) {
      message = e.what();
    }
    ::setrlimit(RLIMIT_FSIZE, &before);
    std::signal(SIGXFSZ, previous);
    CHECK(message.find("could not save the checkpoint of step 1 to ") == 0);
    CHECK(message.find("module-big.pt: File too large") != std::string::npos);
    CHECK(std::distance(fs::directory_iterator(dir.path), fs::directory_iterator()) == 0);
    ckpt.save(2);  // room again: it saves
    CHECK(dlrun::Checkpoint::list(dir.path).size() == 1);
  }

  TEST_CASE("a checkpoint directory that cannot be one fails restore, before any training") {
    TempDir dir;
    fs::create_directories(dir.path);
    std::ofstream(dir.path / "file") << "not a directory";
    Run run(1);
    dlrun::Checkpoint on_file(solo(), dir.path / "file");
    run.track(on_file);
    CHECK_THROWS_WITH_AS(on_file.restore(),
                         ("the checkpoint directory " + (dir.path / "file").string() + " is not a directory").c_str(),
                         dlrun::CheckpointError);
    dlrun::Checkpoint below_file(solo(), dir.path / "file" / "ckpt");
    CHECK_THROWS_WITH_AS(below_file.restore(),
                         ("cannot create the checkpoint directory " + (dir.path / "file" / "ckpt").string() + ": " +
                          (dir.path / "file").string() + " is not a directory")
                             .c_str(),
                         dlrun::CheckpointError);
    // Made by restore() (a place nothing can be made in, /proc for root, fails there), and locked.
    dlrun::Checkpoint fresh(solo(), dir.path / "new" / "ckpt");
    CHECK_FALSE(fresh.restore());
    CHECK(fs::is_directory(dir.path / "new" / "ckpt"));
    CHECK(fs::exists(dir.path / "new" / "ckpt" / ".lock"));
    CHECK(dlrun::Checkpoint::list(dir.path / "new" / "ckpt").empty());
  }

  TEST_CASE("a checkpoint directory another process has locked is said to be in use, and this process's lock is seen by others") {
    TempDir dir;
    fs::create_directories(dir.path / "theirs");
    fs::create_directories(dir.path / "mine");
    const std::string theirs = (dir.path / "theirs").string();
    // Another run's rank 0 holds it (flock(1) from util-linux, as long as its sleep runs).
    REQUIRE(std::system(("flock " + theirs + "/.lock sleep 5 >/dev/null 2>&1 &").c_str()) == 0);
    bool held = false;
    for (int i = 0; i < 100 && !held; ++i) {
      held = std::system(("flock -n " + theirs + "/.lock true").c_str()) != 0;
      if (!held) std::this_thread::sleep_for(std::chrono::milliseconds(50));
    }
    REQUIRE(held);
    // What rank 0 says on stderr, into a file.
    const std::string said_path = (dir.path / "said").string();
    std::fflush(stderr);
    const int saved = ::dup(STDERR_FILENO);
    const int said_fd = ::open(said_path.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0600);
    ::dup2(said_fd, STDERR_FILENO);
    Run run(1);
    dlrun::Checkpoint shared(solo(), dir.path / "theirs");
    run.track(shared);
    CHECK_FALSE(shared.restore());  // a warning, not a refusal: the holder may only read
    dlrun::Checkpoint mine(solo(), dir.path / "mine");
    CHECK_FALSE(mine.restore());
    CHECK_FALSE(mine.restore());  // this process restores again as it likes, without a word
    std::fflush(stderr);
    ::dup2(saved, STDERR_FILENO);
    ::close(saved);
    ::close(said_fd);
    std::ifstream said_file(said_path);
    const std::string said((std::istreambuf_iterator<char>(said_file)), std::istreambuf_iterator<char>());
    CHECK(said.find("the checkpoint directory " + theirs + " is in use by another process") != std::string::npos);
    CHECK(said.find((dir.path / "mine").string() + " is in use") == std::string::npos);
    // Ours, once restored: another process finds it taken.
    CHECK(std::system(("flock -n " + (dir.path / "mine").string() + "/.lock true").c_str()) != 0);
  }

  TEST_CASE("a checkpoint of other objects names what it holds") {
    TempDir dir;
    Run run(1);
    dlrun::Checkpoint ckpt(solo(), dir.path);
    run.track(ckpt);
    ckpt.save(1);
    Run other(2);
    dlrun::Checkpoint sgd(solo(), dir.path);
    sgd.track("model", other.model);
    sgd.track("sgd", *other.adam);
    std::string message;
    try {
      sgd.restore();
    } catch (const dlrun::CheckpointError& e) {
      message = e.what();
    }
    CHECK(message.find("it holds no optimizer 'sgd' (its optimizer: 'adam')") != std::string::npos);
    // Found before anything was loaded: the model is as it was, and the message says so.
    CHECK(message.find("; nothing was restored from it") != std::string::npos);
    CHECK_FALSE(torch::equal(other.model->weight, run.model->weight));
    CHECK(message.find("Exception raised from") == std::string::npos);  // no C++ backtrace
    // A program that tracks a sampler now, and did not then.
    dlrun::Checkpoint no_sampler(solo(), dir.path / "two");
    no_sampler.track("model", run.model);
    no_sampler.save(1);
    dlrun::Checkpoint with_sampler(solo(), dir.path / "two");
    with_sampler.track("model", other.model);
    with_sampler.track(other.sampler);
    CHECK_THROWS_WITH_AS(with_sampler.restore(),
                         ("cannot load checkpoint " + (dir.path / "two" / "step-000000000001").string() +
                          ": its state.txt has no sampler position (the program that wrote it tracked no "
                          "ElasticSampler) ('sampler.epoch') (was it written by a program tracking other objects?); "
                          "nothing was restored from it")
                             .c_str(),
                         dlrun::CheckpointError);
  }

  TEST_CASE("a checkpoint of another shape is refused and changes nothing") {
    // copy_ broadcasts: Linear(4, 1)'s [1, 4] weight filled Linear(4, 2)'s [2, 4] without a word.
    TempDir dir;
    torch::manual_seed(1);
    auto narrow = std::make_shared<torch::nn::LinearImpl>(4, 1);
    dlrun::Checkpoint saver(solo(), dir.path);
    saver.track("model", narrow);
    saver.save(1);
    auto wide = std::make_shared<torch::nn::LinearImpl>(4, 2);
    const auto before = wide->weight.clone();
    dlrun::Checkpoint loader(solo(), dir.path);
    loader.track("model", wide);
    std::string message;
    try {
      loader.restore();
    } catch (const dlrun::CheckpointError& e) {
      message = e.what();
    }
    CHECK(message.find("module 'model': its parameter 'weight' has shape 1x4, the module's has 2x4") !=
          std::string::npos);
    CHECK(message.find("; nothing was restored from it") != std::string::npos);
    CHECK(torch::equal(wide->weight, before));
  }

  TEST_CASE("an optimizer of another class under a saved one's name is refused before anything changes") {
    // LibTorch's load failed on an internal assert (adam.cpp:67) after the model was restored.
    TempDir dir;
    torch::manual_seed(1);
    auto net = std::make_shared<torch::nn::LinearImpl>(4, 1);
    torch::optim::SGD sgd(net->parameters(), 0.1);
    dlrun::Checkpoint saver(solo(), dir.path);
    saver.track("model", net);
    saver.track("opt", sgd);
    saver.save(1);
    auto other = std::make_shared<torch::nn::LinearImpl>(4, 1);
    const auto before = other->weight.clone();
    torch::optim::Adam adam(other->parameters(), 1e-3);
    dlrun::Checkpoint loader(solo(), dir.path);
    loader.track("model", other);
    loader.track("opt", adam);
    std::string message;
    try {
      loader.restore();
    } catch (const dlrun::CheckpointError& e) {
      message = e.what();
    }
    CAPTURE(message);
    CHECK(message.find("optimizer 'opt' was saved by a torch::optim::SGD, and this program tracks a "
                       "torch::optim::Adam under that name") != std::string::npos);
    CHECK(message.find("; nothing was restored from it") != std::string::npos);
    CHECK(torch::equal(other->weight, before));
  }

  TEST_CASE("a sampler of another data set is refused before anything changes") {
    TempDir dir;
    Run run(1);
    dlrun::Checkpoint ckpt(solo(), dir.path);
    run.track(ckpt);
    run.train_step();
    ckpt.save(1);
    Run other(2);
    const auto before = other.model->weight.clone();
    dlrun::ElasticSampler another_set{99, 0, 1, 3};  // another data set: the sampler refuses the state
    dlrun::Checkpoint loader(solo(), dir.path);
    loader.track("model", other.model);
    loader.track("adam", *other.adam);
    loader.track(another_set);
    std::string message;
    try {
      loader.restore();
    } catch (const dlrun::ConfigError& e) {
      message = e.what();
    }
    CHECK(message.find("the checkpoint was taken over 50 samples with seed 3") != std::string::npos);
    CHECK(message.find("; nothing was restored from it") != std::string::npos);
    CHECK(torch::equal(other.model->weight, before));
  }

  TEST_CASE("every Checkpointable is asked before anything is restored") {
    struct Picky : dlrun::Checkpointable {
      std::string checkpoint_state() const override { return "v1"; }
      void restore_checkpoint_state(const std::string&) override {}
      void check_checkpoint_state(const std::string& text) const override {
        if (text != "v2") throw dlrun::ConfigError("state " + text + " is not v2");
      }
    };
    TempDir dir;
    Run run(1);
    Picky picky;
    dlrun::Checkpoint ckpt(solo(), dir.path);
    run.track(ckpt);
    ckpt.track("picky", picky);
    ckpt.save(1);
    Run other(2);
    const auto before = other.model->weight.clone();
    dlrun::Checkpoint loader(solo(), dir.path);
    other.track(loader);
    loader.track("picky", picky);
    std::string message;
    try {
      loader.restore();
    } catch (const dlrun::ConfigError& e) {
      message = e.what();
    }
    CHECK(message == "state v1 is not v2; nothing was restored from it");
    CHECK(torch::equal(other.model->weight, before));
    CHECK(other.sampler.state().position == 0);
  }

  TEST_CASE("a failure after the weights were restored names what was") {
    struct Refuses : dlrun::Checkpointable {
      std::string checkpoint_state() const override { return "x"; }
      void restore_checkpoint_state(const std::string&) override { throw dlrun::ConfigError("not mine"); }
    };
    TempDir dir;
    Run run(1);
    Refuses refuses;
    dlrun::Checkpoint ckpt(solo(), dir.path);
    run.track(ckpt);
    ckpt.track("extra", refuses);
    ckpt.save(1);
    Run other(2);
    dlrun::Checkpoint loader(solo(), dir.path);
    other.track(loader);
    loader.track("extra", refuses);
    std::string message;
    try {
      loader.restore();
    } catch (const dlrun::ConfigError& e) {
      message = e.what();
    }
    CHECK(message.find("not mine; the sampler, module 'model', optimizer 'adam' had been restored from it by then") !=
          std::string::npos);
  }

  TEST_CASE("a save of an earlier step sets the later ones aside, never restored, never removed") {
    // Going back (a restore of an earlier step, a start afresh in the same directory) with
    // keep_last = 1 pruned each new save at once, and a restart resumed the abandoned run.
    TempDir dir;
    Run run(1);
    dlrun::CheckpointOptions options;
    options.keep_last = 1;
    {
      dlrun::Checkpoint ckpt(solo(), dir.path, options);
      run.track(ckpt);
      for (int step = 1; step <= 3; ++step) ckpt.save(step);
    }
    Run afresh(2);
    dlrun::Checkpoint ckpt(solo(), dir.path, options);
    afresh.track(ckpt);
    std::string said;
    dlrun::log::set_sink([&said](std::string_view line) { said += line; });
    ckpt.save(1);
    dlrun::log::set_sink({});
    // A run that never called restore() is asked whether it meant to.
    CHECK(said.find("moved aside as superseded-step-000000000003") != std::string::npos);
    CHECK(said.find("This run never called restore(): to resume, call it after track() and before training") !=
          std::string::npos);
    auto kept = dlrun::Checkpoint::list(dir.path);
    REQUIRE(kept.size() == 1);
    CHECK(kept[0].filename() == "step-000000000001");
    CHECK(fs::is_directory(dir.path / "superseded-step-000000000003"));
    ckpt.save(2);
    CHECK(dlrun::Checkpoint::list(dir.path).front().filename() == "step-000000000002");
    Run resumed(3);
    dlrun::Checkpoint again(solo(), dir.path, options);
    resumed.track(again);
    auto info = again.restore();
    REQUIRE(info.has_value());
    CHECK(info->step == 2);
    CHECK(torch::equal(resumed.model->weight, afresh.model->weight));
    // Going back again past a step set aside before keeps both.
    {
      dlrun::Checkpoint ckpt3(solo(), dir.path, options);
      run.track(ckpt3);
      ckpt3.save(3);
    }
    said.clear();
    dlrun::log::set_sink([&said](std::string_view line) { said += line; });
    again.save(1);  // a run that restored and went back on purpose: no such question
    dlrun::log::set_sink({});
    CHECK(said.find("moved aside") != std::string::npos);
    CHECK(said.find("never called restore()") == std::string::npos);
    // Tracked after restore(): said, since this run did not resume it.
    said.clear();
    dlrun::log::set_sink([&said](std::string_view line) { said += line; });
    Run late(4);
    again.track("late", late.model);
    dlrun::log::set_sink({});
    CHECK(said.find("Checkpoint: module 'late' is tracked after restore(): it is saved from now on, but was not "
                    "restored in this run") != std::string::npos);
    CHECK(fs::is_directory(dir.path / "superseded-step-000000000003"));
    CHECK(fs::is_directory(dir.path / "superseded-step-000000000003.2"));
  }

  TEST_CASE("every rank says why rank 0 could not save") {
    // The other ranks said only "its log says why", and dlrun often reports them first.
    struct Refuses : dlrun::Checkpointable {
      std::string checkpoint_state() const override { throw std::runtime_error("no room for the tokenizer"); }
      void restore_checkpoint_state(const std::string&) override {}
    };
    TempDir dir;
    std::vector<std::string> messages(2);
    dlrun::test::run_ranks(2, [&](dlrun::Context& ctx) {
      Refuses refuses;
      dlrun::Checkpoint ckpt(ctx, dir.path);
      ckpt.track("tokenizer", refuses);
      try {
        ckpt.save(4);
      } catch (const dlrun::CheckpointError& e) {
        messages[ctx.rank()] = e.what();
      }
    });
    const std::string why = "could not save the checkpoint of step 4 to " + dir.path.string() +
                            ": no room for the tokenizer";
    CHECK(messages[0] == why);
    CHECK(messages[1] == "rank 0 " + why);
  }

  TEST_CASE("rank 0 writes, every rank loads the same checkpoint") {
    TempDir dir;
    std::vector<int64_t> steps(3, -1);
    dlrun::test::run_ranks(3, [&](dlrun::Context& ctx) {
      Run run(1);
      dlrun::Checkpoint ckpt(ctx, dir.path);
      run.track(ckpt);
      ckpt.save(7);
      Run fresh(9);
      dlrun::Checkpoint again(ctx, dir.path);
      fresh.track(again);
      steps[ctx.rank()] = again.restore().value().step;
    });
    CHECK(steps == std::vector<int64_t>{7, 7, 7});
    CHECK(dlrun::Checkpoint::list(dir.path).size() == 1);
  }
}

TEST_SUITE("runtime::Checkpoint") {
  TEST_CASE("a restore after DataParallel keeps the gradients reduced") {
    TempDir dir;
    {
      Run run(1);
      dlrun::Checkpoint ckpt(solo(), dir.path);
      run.track(ckpt);
      ckpt.save(1);
    }
    std::vector<at::Tensor> weights(2);
    dlrun::test::run_ranks(2, [&](dlrun::Context& ctx) {
      Run run(1);
      dlrun::DataParallel dp(run.model, ctx);
      dlrun::Checkpoint ckpt(ctx, dir.path);
      run.track(ckpt);
      REQUIRE(ckpt.restore().has_value());
      // Different data on each rank: only reduced gradients keep the weights equal.
      for (int step = 0; step < 2; ++step) {
        run.adam->zero_grad();
        dp.backward(run.model->forward(torch::full({3, 4}, 1.0 + ctx.rank())).pow(2).sum());
        dp.step(*run.adam);
      }
      weights[ctx.rank()] = run.model->weight.detach().clone();
    });
    CHECK(torch::equal(weights[0], weights[1]));
  }
}
