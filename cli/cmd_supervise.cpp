// `dlrun _supervise JOB` and `dlrun _supervise --new` (hidden): a submitted job's detached
// supervisor, started by `dlrun submit` (--new: it records the job it reads on stdin first
// and answers its id on stdout) or by the queue for a job that lost its own; never by hand.
// The work is launcher::record_new_job and launcher::run_submitted_job (job_queue.hpp).

#include <fcntl.h>
#include <unistd.h>

#include <iostream>
#include <iterator>
#include <memory>

#include "commands.hpp"
#include "dlrun/launcher/job_queue.hpp"
#include "dlrun/launcher/process.hpp"

namespace dlrun::cli {
namespace {

struct SuperviseArgs {
  int64_t id = 0;
  bool new_job = false;
};

int run_supervise(const SuperviseArgs& args) {
  const auto env = launcher::current_environment();
  int64_t id = args.id;
  if (args.new_job) {
    std::string bytes((std::istreambuf_iterator<char>(std::cin)), std::istreambuf_iterator<char>());
    id = launcher::record_new_job(env, bytes, std::cout);
    std::cout.flush();
    // The submitter reads the answer to its end: stdout must not stay the pipe.
    int null_fd = ::open("/dev/null", O_RDWR | O_CLOEXEC);
    if (null_fd < 0 || ::dup2(null_fd, STDOUT_FILENO) < 0) ::close(STDOUT_FILENO);
    if (null_fd >= 0) ::close(null_fd);
    if (id == 0) return 2;
  }
  return launcher::run_submitted_job(id, env);
}

}  // namespace

Command add_supervise_command(CLI::App& dlrun) {
  auto args = std::make_shared<SuperviseArgs>();
  CLI::App* app = dlrun.add_subcommand("_supervise", "Internal: run a submitted job (started by dlrun submit)");
  app->group("");  // hidden from --help
  app->add_option("JOB", args->id);
  app->add_flag("--new", args->new_job);
  return {app, [args](const Trailing&) { return run_supervise(*args); }};
}

}  // namespace dlrun::cli
