// The Supervisor's decisions, driven through a fake ProcessRunner: no process is started.
// The fake's members end when the test says so, or as a cooperative program would when
// signalled (SIGTERM ends them, SIGUSR1 makes them exit 75), unless told to ignore it. Like
// the runtime, they say at their start that they handle the stop request (RUN_DIR/handles-stop),
// unless told not to.

#include "dlrun/launcher/supervisor.hpp"

#include <fcntl.h>
#include <signal.h>
#include <stdlib.h>
#include <unistd.h>

#include <chrono>
#include <filesystem>
#include <fstream>
#include <map>
#include <set>

#include <boost/asio/post.hpp>
#include <doctest/doctest.h>

#include "dlrun/log.hpp"
#include "dlrun/protocol.hpp"

using namespace dlrun::launcher;
namespace fs = std::filesystem;

namespace {

struct FakeWorld;

class FakeGroup : public MemberGroup {
 public:
  FakeGroup(FakeWorld& world, std::vector<Member> members)
      : m_world(world), m_members(std::move(members)), m_exits(m_members.size()) {}

  void end(size_t index, ExitStatus status);

  std::vector<size_t> reap() override;
  void signal_running(int signal) override;
  void signal_leaders(int signal) override;
  void kill_all_groups() override {}
  void signal_remnant(size_t index, int signal) override;
  bool remnants_alive() const override;
  void close_pipes() override;
  void on_drained(std::function<void()> callback) override;
  size_t size() const override { return m_members.size(); }
  size_t running() const override {
    size_t n = 0;
    for (const auto& exit : m_exits) n += exit ? 0 : 1;
    return n;
  }
  bool drained() const override;
  const Member& member(size_t index) const override { return m_members.at(index); }
  pid_t pid(size_t index) const override { return 1000 + static_cast<pid_t>(index); }
  std::optional<double> cpu_seconds(size_t index) const override;
  const std::optional<ExitStatus>& exit_status(size_t index) const override { return m_exits.at(index); }
  const std::deque<std::string>& stderr_tail(size_t) const override { return m_tail; }
  std::string first_dlrun_error(size_t) const override { return {}; }

  std::vector<int> signals;  // in the order sent; leaders-only ones as well

 private:
  FakeWorld& m_world;
  std::vector<Member> m_members;
  std::vector<std::optional<ExitStatus>> m_exits;
  std::vector<size_t> m_ended;
  std::deque<std::string> m_tail;
};

// What the test sees and steers: every attempt's group, and how members answer signals.
struct FakeWorld {
  boost::asio::io_context* io = nullptr;
  std::function<void()> children_changed;
  std::vector<FakeGroup*> attempts;      // owned by the Supervisor while current
  std::vector<std::vector<int>> signals;  // per attempt
  std::vector<std::vector<Member>> members;
  std::set<size_t> ignore_sigterm;       // members (by index) that ignore stop signals
  std::set<size_t> remnants;             // members whose children outlive them (until cleared)
  std::vector<std::pair<size_t, int>> remnant_signals;  // (member, signal) sent to those children
  std::vector<int> to_leaders;           // stop signals sent to the members' own processes only
  bool ignore_stop_request = false;      // members do not answer SIGUSR1 with exit 75
  bool announce_stop_handling = true;    // each attempt writes RUN_DIR/handles-stop at its start
  std::string run_dir;
  std::function<void(size_t attempt, FakeGroup& group)> on_start;
  std::function<void(FakeGroup& group)> on_reap;  // before each reap: members may end then
  std::map<size_t, double> cpu_per_look;          // CPU seconds a member gains at each look (else none)
  std::map<size_t, double> cpu;                   // what it has used so far
  bool output_held = false;               // an escaped child holds the members' pipes open
  std::function<void()> drained_callback;  // the Supervisor's, once it waits for the drain

  FakeGroup& current() { return *attempts.back(); }
  void notify() {
    boost::asio::post(*io, [this] { children_changed(); });
  }
};

void FakeGroup::end(size_t index, ExitStatus status) {
  if (m_exits.at(index)) return;
  m_exits[index] = status;
  m_ended.push_back(index);
  m_world.notify();
}

std::vector<size_t> FakeGroup::reap() {
  if (m_world.on_reap) m_world.on_reap(*this);
  return std::exchange(m_ended, {});
}

std::optional<double> FakeGroup::cpu_seconds(size_t index) const {
  auto it = m_world.cpu_per_look.find(index);
  return m_world.cpu[index] += it == m_world.cpu_per_look.end() ? 0.0 : it->second;
}

bool FakeGroup::drained() const { return !m_world.output_held; }

void FakeGroup::on_drained(std::function<void()> callback) { m_world.drained_callback = std::move(callback); }

void FakeGroup::close_pipes() {
  if (!m_world.output_held) return;
  m_world.output_held = false;
  if (m_world.drained_callback) m_world.drained_callback();
}

void FakeGroup::signal_running(int signal) {
  signals.push_back(signal);
  m_world.signals.back().push_back(signal);
  for (size_t i = 0; i < m_members.size(); ++i) {
    if (signal == SIGKILL || !m_world.ignore_sigterm.count(i)) end(i, ExitStatus::killed(signal));
  }
}

void FakeGroup::signal_leaders(int signal) {
  if (signal != dlrun::signals::k_stop_request) {
    m_world.to_leaders.push_back(signal);
    return signal_running(signal);  // as to a group: the fakes start no children
  }
  signals.push_back(signal);
  m_world.signals.back().push_back(signal);
  if (m_world.ignore_stop_request) return;
  for (size_t i = 0; i < m_members.size(); ++i) end(i, ExitStatus::exited(dlrun::exit_code::k_restart_me));
}

void FakeGroup::signal_remnant(size_t index, int signal) {
  // Once each, as the real group signals each orphan once.
  const auto& sent = m_world.remnant_signals;
  const bool before = std::any_of(sent.begin(), sent.end(), [&](const auto& s) { return s.first == index; });
  if (m_world.remnants.count(index) && m_exits.at(index) && !before) m_world.remnant_signals.push_back({index, signal});
}

bool FakeGroup::remnants_alive() const {
  for (size_t index : m_world.remnants) {
    if (m_exits.at(index)) return true;
  }
  return false;
}

class FakeRunner : public ProcessRunner {
 public:
  explicit FakeRunner(FakeWorld& world) : m_world(world) {}
  void begin(std::function<void()> children_changed) override { m_world.children_changed = std::move(children_changed); }
  void end() override {}
  std::unique_ptr<MemberGroup> start(const std::vector<Member>& members, const OutputFactory&) override {
    auto group = std::make_unique<FakeGroup>(m_world, members);
    m_world.attempts.push_back(group.get());
    m_world.signals.emplace_back();
    m_world.members.push_back(members);
    if (m_world.announce_stop_handling) std::ofstream(m_world.run_dir + "/" + dlrun::run_files::k_handles_stop).flush();
    if (m_world.on_start) m_world.on_start(m_world.attempts.size() - 1, *group);
    return group;
  }

 private:
  FakeWorld& m_world;
};

struct Fixture {
  Fixture() {
    char pattern[] = "/tmp/dlrun-supervisor-test-XXXXXX";
    run_dir = ::mkdtemp(pattern);
    world.run_dir = run_dir;
    dlrun::log::set_level(dlrun::log::Level::off);
  }
  ~Fixture() {
    std::error_code ec;
    fs::remove_all(run_dir, ec);
    dlrun::log::set_level(dlrun::log::Level::info);
  }

  Plan job(int ranks) const {
    Plan job;
    job.options.command = {"train"};
    job.options.master_port = 29999;  // no port is probed
    job.options.grace_seconds = 0.05;
    job.options.quiet = true;
    job.program = {"/nonexistent/train", {"train"}, "/"};
    job.world_size = ranks;
    job.job_id = "test-job";
    job.run_dir = run_dir;
    job.host = "host";
    job.cores = 2;
    return job;
  }

  // Runs the supervisor until `done` holds or it finishes (false: neither within 30 s).
  bool run_until(Supervisor& supervisor, const std::function<bool()>& done) {
    const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(30);
    while (!done()) {
      if (std::chrono::steady_clock::now() > deadline) return false;
      if (!supervisor.poll_once(std::chrono::milliseconds(20))) return done();
    }
    return true;
  }
  // Runs it to its end; returns dlrun's exit code.
  int finish(Supervisor& supervisor) {
    const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(30);
    while (supervisor.poll_once(std::chrono::milliseconds(20))) {
      REQUIRE(std::chrono::steady_clock::now() < deadline);
    }
    supervisor.end();
    return supervisor.exit_code();
  }

  Supervisor::RunnerFactory runner() {
    return [this](boost::asio::io_context& io) {
      world.io = &io;
      return std::make_unique<FakeRunner>(world);
    };
  }

  std::string read_file(const std::string& name) const {
    std::ifstream in(run_dir + "/" + name);
    std::string text((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
    return text;
  }

  std::string run_dir;
  FakeWorld world;
};

std::string env_of(const Member& member, const std::string& name) {
  auto it = member.spec.env.find(name);
  return it == member.spec.env.end() ? "" : it->second;
}

}  // namespace

TEST_SUITE("launcher::Supervisor") {
  TEST_CASE_FIXTURE(Fixture, "a failing rank stops the whole group, and dlrun exits with its code") {
    world.on_start = [](size_t, FakeGroup& group) { group.end(1, ExitStatus::exited(7)); };
    Supervisor supervisor(job(3), runner());
    supervisor.begin();
    CHECK(finish(supervisor) == 7);
    CHECK(supervisor.summary() == "rank 1 exited with code 7");
    CHECK(supervisor.failed_rank() == 1);
    REQUIRE(world.attempts.size() == 1);
    CHECK(world.signals[0] == std::vector<int>{SIGTERM});
    CHECK(read_file("job.json").find("\"state\": \"failed\"") != std::string::npos);
  }

  TEST_CASE_FIXTURE(Fixture, "ranks that fail at the same moment are named together, those stopped are not") {
    // Rank 0 fails; rank 1 ends moments later (at the second look, before any stop), rank 2
    // only when it is stopped.
    int reaps = 0;
    world.on_start = [](size_t, FakeGroup& group) { group.end(0, ExitStatus::exited(3)); };
    world.on_reap = [&reaps](FakeGroup& group) {
      if (++reaps == 2) group.end(1, ExitStatus::exited(4));
    };
    // What it says on stderr, into a file.
    dlrun::log::set_level(dlrun::log::Level::info);
    const int saved = ::dup(STDERR_FILENO);
    const int said_fd = ::open((run_dir + "/said").c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0600);
    ::dup2(said_fd, STDERR_FILENO);
    Supervisor supervisor(job(3), runner());
    supervisor.begin();
    const int code = finish(supervisor);
    ::dup2(saved, STDERR_FILENO);
    ::close(saved);
    ::close(said_fd);
    CHECK(code == 3);
    CHECK(supervisor.summary() == "rank 0 exited with code 3");
    const std::string said = read_file("said");
    CHECK(said.find("rank 0 exited with code 3; at the same moment rank 1 exited with code 4") != std::string::npos);
    CHECK(said.find("rank 2") == std::string::npos);
  }

  TEST_CASE_FIXTURE(Fixture, "ranks left using no CPU after another ended with 0 are said to wait for it, once") {
    // Rank 1 ends with 0; rank 0 works (CPU) at the first look, then waits (none) at the next.
    world.on_start = [](size_t, FakeGroup& group) { group.end(1, ExitStatus::exited(0)); };
    world.cpu_per_look[0] = 5.0;
    Plan plan = job(2);
    plan.waiting_check_seconds = 0.1;
    plan.options.quiet = false;
    dlrun::log::set_level(dlrun::log::Level::info);
    const int saved = ::dup(STDERR_FILENO);
    const int said_fd = ::open((run_dir + "/said").c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0600);
    ::dup2(said_fd, STDERR_FILENO);
    Supervisor supervisor(plan, runner());
    supervisor.begin();
    const auto said = [this] { return read_file("said"); };
    const bool waited = run_until(supervisor, [&] {
      if (said().find("used no CPU") == std::string::npos) {
        if (world.cpu[0] > 9) world.cpu_per_look[0] = 0;  // its evaluation is done: it waits now
        return false;
      }
      return true;
    });
    supervisor.handle_stop_signal(SIGTERM);
    finish(supervisor);
    ::dup2(saved, STDERR_FILENO);
    ::close(saved);
    ::close(said_fd);
    CHECK(waited);
    const std::string text = said();
    CHECK(text.find("rank 1 ended with code 0, and rank 0 has used no CPU in the last 0.1 s: if it waits for it") !=
          std::string::npos);
    CHECK(world.cpu[0] > 9);  // not said while it worked
  }

  TEST_CASE_FIXTURE(Fixture, "a failing rank's error file (@record) names its exception") {
    world.on_start = [](size_t, FakeGroup& group) {
      std::ofstream(env_of(group.member(1), dlrun::env::k_torchelastic_error_file))
          << R"({"message": {"message": "ValueError: boom", "extraInfo": {"py_callstack": "Traceback\nValueError: boom\n"}}})";
      group.end(1, ExitStatus::exited(1));
    };
    Supervisor supervisor(job(2), runner());
    supervisor.begin();
    CHECK(finish(supervisor) == 1);
    CHECK(supervisor.summary() == "rank 1 exited with code 1: ValueError: boom");
  }

  TEST_CASE_FIXTURE(Fixture, "an error file of an earlier attempt is not taken for the failure's") {
    world.on_start = [](size_t attempt, FakeGroup& group) {
      if (attempt == 0) {
        std::ofstream(env_of(group.member(1), dlrun::env::k_torchelastic_error_file))
            << R"({"message": "ValueError: first attempt"})";
        group.end(1, ExitStatus::exited(1));
      } else {
        group.end(1, ExitStatus::exited(3));  // without an error file
      }
    };
    Plan j = job(2);
    j.options.max_restarts = 1;
    j.fresh_run_dir = true;
    Supervisor supervisor(j, runner());
    supervisor.begin();
    CHECK(finish(supervisor) == 3);
    CHECK(world.attempts.size() == 2);
    CHECK(supervisor.summary() == "rank 1 exited with code 3");
  }

  TEST_CASE_FIXTURE(Fixture, "an error file in a run directory given again is not taken for the failure's") {
    std::ofstream(run_dir + "/rank-0.error.json") << R"({"message": "OldError: from before"})";
    world.on_start = [](size_t, FakeGroup& group) { group.end(0, ExitStatus::exited(3)); };
    Plan j = job(2);
    j.fresh_run_dir = false;  // it existed before
    Supervisor supervisor(j, runner());
    supervisor.begin();
    CHECK(finish(supervisor) == 3);
    CHECK(supervisor.summary() == "rank 0 exited with code 3");
    CHECK_FALSE(fs::exists(run_dir + "/rank-0.error.json"));
  }

  TEST_CASE_FIXTURE(Fixture, "the restart budget is the job's, and a restart request does not spend it") {
    // Attempts: failure, restart request (every rank exits 75), failure, failure: the budget
    // of 2 is spent by the first and third; the fourth ends the job.
    world.on_start = [](size_t attempt, FakeGroup& group) {
      if (attempt == 1) {
        for (size_t i = 0; i < group.size(); ++i) group.end(i, ExitStatus::exited(dlrun::exit_code::k_restart_me));
      } else {
        group.end(0, ExitStatus::exited(5));
      }
    };
    Plan j = job(2);
    j.options.max_restarts = 2;
    std::vector<int> restarts, failures, resizes, requested;
    j.on_restart = [&](const RestartCounts& counts) {
      restarts.push_back(counts.all);
      failures.push_back(counts.failures);
      resizes.push_back(counts.resizes);
      requested.push_back(counts.requested);
    };
    Supervisor supervisor(j, runner());
    supervisor.begin();
    CHECK(finish(supervisor) == 5);
    CHECK(world.attempts.size() == 4);
    CHECK(restarts == std::vector<int>{1, 2, 3});
    CHECK(failures == std::vector<int>{1, 1, 2});
    CHECK(resizes == std::vector<int>{0, 0, 0});
    CHECK(requested == std::vector<int>{0, 1, 1});  // the second attempt's ranks asked for it
    CHECK(supervisor.failed_rank() == 0);
    CHECK(env_of(world.members[3][0], dlrun::env::k_restart_count) == "3");
  }

  TEST_CASE_FIXTURE(Fixture, "a rank that ignores SIGTERM is killed once the grace period is over") {
    world.ignore_sigterm = {0};
    world.on_start = [](size_t, FakeGroup& group) { group.end(1, ExitStatus::exited(4)); };
    Supervisor supervisor(job(2), runner());
    supervisor.begin();
    CHECK(finish(supervisor) == 4);
    CHECK(world.signals[0] == std::vector<int>{SIGTERM, SIGKILL});
    CHECK(world.attempts.size() == 1);
  }

  TEST_CASE_FIXTURE(Fixture, "a stop signal goes to each rank's own process, what it started gets it once it ended") {
    // To the process groups, it killed a DataLoader's workers while the rank saved a checkpoint.
    world.ignore_sigterm = {0, 1};
    world.remnants = {0, 1};
    Plan j = job(2);
    j.options.grace_seconds = 600;
    Supervisor supervisor(j, runner());
    supervisor.begin();
    supervisor.handle_stop_signal(SIGTERM);
    CHECK(world.to_leaders == std::vector<int>{SIGTERM});
    CHECK(world.remnant_signals.empty());
    world.current().end(0, ExitStatus::exited(0));
    world.current().end(1, ExitStatus::exited(0));
    for (int i = 0; i < 10; ++i) REQUIRE(supervisor.poll_once(std::chrono::milliseconds(20)));
    CHECK(world.remnant_signals == std::vector<std::pair<size_t, int>>{{0, SIGTERM}, {1, SIGTERM}});
    world.remnants.clear();  // they have ended too
    CHECK(finish(supervisor) == 143);
    CHECK(world.signals[0] == std::vector<int>{SIGTERM});  // no SIGKILL
  }

  TEST_CASE_FIXTURE(Fixture, "what ended ranks started is killed when the grace period is over") {
    world.remnants = {0};
    Supervisor supervisor(job(2), runner());  // a grace of 0.05 s
    supervisor.begin();
    supervisor.handle_stop_signal(SIGINT);
    CHECK(finish(supervisor) == 130);
    CHECK(world.remnant_signals == std::vector<std::pair<size_t, int>>{{0, SIGINT}});
  }

  TEST_CASE_FIXTURE(Fixture, "a second stop signal kills every rank at once") {
    world.ignore_sigterm = {0, 1};
    Supervisor supervisor(job(2), runner());
    supervisor.begin();
    supervisor.handle_stop_signal(SIGINT);
    CHECK(world.signals[0] == std::vector<int>{SIGINT});
    supervisor.handle_stop_signal(SIGINT);
    CHECK(finish(supervisor) == 130);
    CHECK(world.signals[0] == std::vector<int>{SIGINT, SIGKILL});
    CHECK(supervisor.summary() == "stopped by SIGINT");
    CHECK_FALSE(supervisor.failed_rank());
  }

  TEST_CASE_FIXTURE(Fixture, "a second SIGTERM right after the first is the same request: the grace period holds") {
    // Slurm signals every step of a job and srun passes the signal on again: the agents got
    // two SIGTERMs and killed their ranks without the grace period.
    world.ignore_sigterm = {0, 1};  // they take their time: a checkpoint
    Supervisor supervisor(job(2), runner());
    supervisor.begin();
    supervisor.handle_stop_signal(SIGTERM);
    supervisor.handle_stop_signal(SIGTERM);
    CHECK(world.signals[0] == std::vector<int>{SIGTERM});  // passed on once, no SIGKILL
    world.current().end(0, ExitStatus::exited(0));
    world.current().end(1, ExitStatus::exited(0));
    CHECK(finish(supervisor) == 143);
  }

  TEST_CASE_FIXTURE(Fixture, "a stop signal while a failure stops the group kills at once and keeps the failure") {
    world.ignore_sigterm = {0};
    world.on_start = [](size_t, FakeGroup& group) { group.end(1, ExitStatus::exited(5)); };
    Plan j = job(2);
    j.options.grace_seconds = 600;  // the signal, not the grace period, ends rank 0
    j.options.max_restarts = 2;     // and no restart follows it
    Supervisor supervisor(j, runner());
    supervisor.begin();
    REQUIRE(run_until(supervisor, [&] { return world.signals[0] == std::vector<int>{SIGTERM}; }));
    supervisor.handle_stop_signal(SIGINT);
    CHECK(finish(supervisor) == 5);
    CHECK(world.signals[0] == std::vector<int>{SIGTERM, SIGKILL});
    CHECK(world.attempts.size() == 1);
    CHECK(supervisor.summary() == "rank 1 exited with code 5");
    CHECK(supervisor.failed_rank() == 1);
    CHECK(read_file("job.json").find("\"state\": \"failed\"") != std::string::npos);
  }

  TEST_CASE_FIXTURE(Fixture, "a stop signal once every rank has exited cuts the drain short and keeps their outcome") {
    world.output_held = true;
    world.on_start = [](size_t, FakeGroup& group) {
      for (size_t i = 0; i < group.size(); ++i) group.end(i, ExitStatus::exited(0));
    };
    Supervisor supervisor(job(2), runner());
    supervisor.begin();
    REQUIRE(run_until(supervisor, [&] { return bool(world.drained_callback); }));
    supervisor.handle_stop_signal(SIGTERM);
    CHECK(finish(supervisor) == 0);  // not 143: the ranks had finished
    CHECK(supervisor.summary().empty());
    CHECK(read_file("job.json").find("\"state\": \"succeeded\"") != std::string::npos);
  }

  TEST_CASE_FIXTURE(Fixture, "a stop signal once every rank has asked for a restart stops the job") {
    world.output_held = true;
    world.on_start = [](size_t, FakeGroup& group) {
      for (size_t i = 0; i < group.size(); ++i) group.end(i, ExitStatus::exited(dlrun::exit_code::k_restart_me));
    };
    Supervisor supervisor(job(2), runner());
    supervisor.begin();
    REQUIRE(run_until(supervisor, [&] { return bool(world.drained_callback); }));
    supervisor.handle_stop_signal(SIGTERM);
    CHECK(finish(supervisor) == 143);
    CHECK(world.attempts.size() == 1);
    CHECK(supervisor.summary() == "stopped by SIGTERM");
    CHECK(read_file("job.json").find("\"state\": \"cancelled\"") != std::string::npos);
  }

  TEST_CASE_FIXTURE(Fixture, "ranks that ask for a restart right after their start are restarted later and later") {
    // Every attempt asks for a restart at once: the first four restarts come at once, the
    // fifth after 1 s (a hot loop ran hundreds a second); a stop signal while it waits ends
    // the job without another start.
    world.on_start = [](size_t, FakeGroup& group) {
      for (size_t i = 0; i < group.size(); ++i) group.end(i, ExitStatus::exited(dlrun::exit_code::k_restart_me));
    };
    Supervisor supervisor(job(2), runner());
    supervisor.begin();
    const auto start = std::chrono::steady_clock::now();
    REQUIRE(run_until(supervisor, [&] { return world.attempts.size() == 5; }));
    CHECK(std::chrono::steady_clock::now() - start >= std::chrono::seconds(1));
    // The fifth asked again: the sixth start waits 2 s, and a signal comes first.
    const auto fifth = std::chrono::steady_clock::now();
    REQUIRE(run_until(supervisor, [&] { return std::chrono::steady_clock::now() - fifth > std::chrono::milliseconds(300); }));
    CHECK(world.attempts.size() == 5);  // it waits
    supervisor.handle_stop_signal(SIGTERM);
    CHECK(finish(supervisor) == 143);
    CHECK(world.attempts.size() == 5);
    CHECK(supervisor.summary() == "stopped by SIGTERM");
  }

  TEST_CASE_FIXTURE(Fixture, "standard output's reader gone ends the job as SIGPIPE would, also between attempts") {
    // While the ranks run: they are stopped.
    {
      Supervisor supervisor(job(2), runner());
      supervisor.begin();
      REQUIRE(run_until(supervisor, [&] { return world.attempts.size() == 1; }));
      supervisor.handle_out_reader_gone();
      CHECK(finish(supervisor) == 141);
      CHECK(world.signals[0] == std::vector<int>{SIGTERM});
      CHECK(supervisor.summary() == "stopped: standard output's reader has gone");
    }
    // While a restart waits (ranks that asked again and again): none comes.
    world = FakeWorld{};
    world.run_dir = run_dir;
    world.on_start = [](size_t, FakeGroup& group) {
      for (size_t i = 0; i < group.size(); ++i) group.end(i, ExitStatus::exited(dlrun::exit_code::k_restart_me));
    };
    Supervisor supervisor(job(2), runner());
    supervisor.begin();
    REQUIRE(run_until(supervisor, [&] { return world.attempts.size() == 4; }));
    const auto fourth = std::chrono::steady_clock::now();
    REQUIRE(run_until(supervisor, [&] { return std::chrono::steady_clock::now() - fourth > std::chrono::milliseconds(200); }));
    supervisor.handle_out_reader_gone();
    CHECK(finish(supervisor) == 141);
    CHECK(world.attempts.size() == 4);
  }

  TEST_CASE_FIXTURE(Fixture, "the tenth quick restart request in a row ends the job as failed, with 1") {
    world.on_start = [](size_t, FakeGroup& group) {
      for (size_t i = 0; i < group.size(); ++i) group.end(i, ExitStatus::exited(dlrun::exit_code::k_restart_me));
    };
    Plan plan = job(2);
    plan.restart_waits = false;
    Supervisor supervisor(plan, runner());
    supervisor.begin();
    CHECK(finish(supervisor) == 1);
    CHECK(world.attempts.size() == 10);  // nine restarts, and the tenth request ends it
    CHECK(supervisor.summary().find("ranks asked to be restarted (exit 75) 10 times in a row") == 0);
    CHECK(read_file("job.json").find("\"state\": \"failed\"") != std::string::npos);
    CHECK(read_file("job.json").find("\"restarts\": 9") != std::string::npos);
  }

  TEST_CASE_FIXTURE(Fixture, "resize up and down restarts the group at the new size") {
    Plan j = job(2);
    j.min_world_size = 1;
    j.max_world_size = 4;
    std::vector<RestartCounts> counts;
    j.on_restart = [&](const RestartCounts& c) { counts.push_back(c); };
    Supervisor supervisor(j, runner());
    supervisor.begin();
    CHECK(supervisor.resize({5, {}}) == std::optional<std::string>("error: 5 ranks is outside the job's range 1:4"));
    CHECK(supervisor.resize({2, {}}) == std::optional<std::string>("ok 2"));
    CHECK_FALSE(supervisor.resize({3, {}}));  // under way: the ranks are asked to stop
    CHECK(world.signals[0] == std::vector<int>{dlrun::signals::k_stop_request});
    CHECK(supervisor.resize({1, {}}) ==
          std::optional<std::string>("error: the job is stopping or restarting; try again in a moment"));
    REQUIRE(run_until(supervisor, [&] { return world.attempts.size() == 2; }));
    CHECK(world.members[1].size() == 3);
    CHECK(env_of(world.members[1][2], dlrun::env::k_world_size) == "3");
    CHECK(read_file("resize.result").find("ok 3") != std::string::npos);

    CHECK_FALSE(supervisor.resize({1, {}}));
    REQUIRE(run_until(supervisor, [&] { return world.attempts.size() == 3; }));
    CHECK(world.members[2].size() == 1);
    CHECK(env_of(world.members[2][0], dlrun::env::k_world_size) == "1");
    world.current().end(0, ExitStatus::exited(0));
    CHECK(finish(supervisor) == 0);
    // Resizes are restarts (DLRUN_RESTART_COUNT) that spend nothing: counted apart from failures.
    REQUIRE(counts.size() == 2);
    CHECK((counts[1].all == 2 && counts[1].failures == 0 && counts[1].resizes == 2 && counts[1].requested == 0));
    CHECK_FALSE(supervisor.failed_rank());
  }

  TEST_CASE_FIXTURE(Fixture, "ranks that have not said they handle the stop request are resized only by a restart") {
    world.announce_stop_handling = false;
    Plan j = job(2);
    j.min_world_size = 1;
    j.max_world_size = 4;
    Supervisor supervisor(j, runner());
    supervisor.begin();
    auto answer = supervisor.resize({1, {}});
    REQUIRE(answer);
    CHECK(answer->rfind("refused: its ranks have not said that they handle the stop request", 0) == 0);
    CHECK(world.signals[0].empty());  // nothing happened to them
    CHECK(supervisor.resize({2, {}}) == std::optional<std::string>("ok 2"));  // the same size needs nothing

    CHECK_FALSE(supervisor.resize({1, {}, Unannounced::restart}));
    CHECK(world.signals[0] == std::vector<int>{SIGTERM});  // a stop, not the stop request
    REQUIRE(run_until(supervisor, [&] { return world.attempts.size() == 2; }));
    CHECK(world.members[1].size() == 1);
    CHECK(read_file("resize.result") == "ok 1 restarted\n");

    // Once the ranks say it, the stop request goes out again.
    std::ofstream(run_dir + "/" + dlrun::run_files::k_handles_stop).flush();
    CHECK_FALSE(supervisor.resize({2, {}, Unannounced::restart}));
    CHECK(world.signals[1] == std::vector<int>{dlrun::signals::k_stop_request});
    REQUIRE(run_until(supervisor, [&] { return world.attempts.size() == 3; }));
    CHECK(read_file("resize.result") == "ok 2\n");
    // Each attempt starts unannounced: the file is removed before its ranks start.
    CHECK_FALSE(fs::exists(run_dir + "/" + dlrun::run_files::k_handles_stop));
    world.current().end(0, ExitStatus::exited(0));
    world.current().end(1, ExitStatus::exited(0));
    CHECK(finish(supervisor) == 0);
  }

  TEST_CASE_FIXTURE(Fixture, "ranks that finish before a resize reaches them end the job, and the resize says so") {
    Plan j = job(2);
    j.min_world_size = 1;
    j.max_world_size = 4;
    Supervisor supervisor(j, runner());
    supervisor.begin();
    world.ignore_stop_request = true;
    // The stop request goes out, but both ranks end their work with 0 before they see it.
    CHECK_FALSE(supervisor.resize({3, {}}));
    world.current().end(0, ExitStatus::exited(0));
    world.current().end(1, ExitStatus::exited(0));
    CHECK(finish(supervisor) == 0);
    CHECK(world.attempts.size() == 1);
    CHECK(read_file("resize.result").find("error: the job finished before it could be resized") !=
          std::string::npos);
  }

  TEST_CASE_FIXTURE(Fixture, "a rank without progress for the watchdog period counts as failed") {
    Plan j = job(2);
    j.options.watchdog_seconds = 0.1;
    Supervisor supervisor(j, runner());
    supervisor.begin();
    CHECK(finish(supervisor) == 128 + SIGKILL);
    // Neither rank ever reported: none is singled out, and the message says what counts.
    CHECK(supervisor.summary().rfind(
              "no rank made progress for 0.1 s (--watchdog): treating the job as failed. No rank has touched its "
              "progress file (DLRUN_PROGRESS_FILE) since it started", 0) == 0);
    CHECK(world.signals[0] == std::vector<int>{SIGTERM});
  }

  TEST_CASE_FIXTURE(Fixture, "a GPU whose rank fails twice in a row is left out") {
    Plan j = job(3);
    j.gpu_ids = {"0", "1", "2"};
    j.min_world_size = 1;
    j.max_world_size = 3;
    j.options.max_restarts = 5;
    world.on_start = [](size_t attempt, FakeGroup& group) {
      if (attempt < 2) {
        group.end(1, ExitStatus::exited(3));  // rank 1, on GPU 1
      } else {
        for (size_t i = 0; i < group.size(); ++i) group.end(i, ExitStatus::exited(0));
      }
    };
    Supervisor supervisor(j, runner());
    supervisor.begin();
    CHECK(finish(supervisor) == 0);
    REQUIRE(world.attempts.size() == 3);
    CHECK(world.members[1].size() == 3);  // one failure is not enough
    REQUIRE(world.members[2].size() == 2);
    CHECK(env_of(world.members[2][0], dlrun::env::k_cuda_visible_devices) == "0");
    CHECK(env_of(world.members[2][1], dlrun::env::k_cuda_visible_devices) == "2");
  }
}
