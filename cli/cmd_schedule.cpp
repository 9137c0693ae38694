// `dlrun _schedule` (hidden): the goodput scheduler, started detached by the queue when a
// goodput job needs one (launcher::JobQueue::ensure_scheduler), never by hand. It ends by
// itself when no goodput job is left. The work is launcher::run_scheduler.

#include <memory>

#include "commands.hpp"
#include "dlrun/launcher/process.hpp"
#include "dlrun/launcher/scheduler_loop.hpp"

namespace dlrun::cli {

Command add_schedule_command(CLI::App& dlrun) {
  CLI::App* app = dlrun.add_subcommand("_schedule", "Internal: the goodput scheduler (started by the job queue)");
  app->group("");  // hidden from --help
  return {app, [](const Trailing&) { return launcher::run_scheduler(launcher::current_environment()); }};
}

}  // namespace dlrun::cli
