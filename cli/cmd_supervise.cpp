// `dlrun _supervise JOB` (hidden): a submitted job's detached supervisor, started by
// `dlrun submit`; never by hand. The work is launcher::run_submitted_job (job_runner.cpp).

#include <memory>

#include "commands.hpp"
#include "dlrun/launcher/job_queue.hpp"
#include "dlrun/launcher/process.hpp"

namespace dlrun::cli {

Command add_supervise_command(CLI::App& dlrun) {
  auto id = std::make_shared<int64_t>(0);
  CLI::App* app = dlrun.add_subcommand("_supervise", "Internal: run a submitted job (started by dlrun submit)");
  app->group("");  // hidden from --help
  app->add_option("JOB", *id)->required();
  return {app, [id](const Trailing&) { return launcher::run_submitted_job(*id, launcher::current_environment()); }};
}

}  // namespace dlrun::cli
