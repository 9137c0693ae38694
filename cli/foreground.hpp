#pragma once
// What `dlrun local` and `dlrun run` share as runs in the foreground: each is a job in the
// store (launcher/foreground_job.hpp) that --name names and --resume takes up again.

#include <CLI/CLI.hpp>
#include <memory>
#include <string>

#include "dlrun/launcher/foreground_job.hpp"
#include "dlrun/launcher/plan.hpp"

namespace dlrun::cli {

struct ForegroundArgs {
  std::string name;
  std::string resume;
  bool resumed_alone = false;  // run again by a bare --resume (run_again): not for users
};

void add_foreground_options(CLI::App* app, ForegroundArgs& args);

// `--resume JOB` with no program: runs the job's own command line again in its working
// directory (this process is replaced); otherwise returns. Call it before checking anything
// else the command line lacks then (dlrun run's hosts).
void run_again_if_resume_alone(const ForegroundArgs& args, const CLI::App& app, launcher::JobOrigin origin,
                               const launcher::PlanOptions& options);

// Before the plan is made. With --resume and no program, runs the job's own command line
// again in its working directory (this process is replaced: never returns then). Otherwise
// the job to plan with: options.run_dir becomes a resumed job's run directory.
std::unique_ptr<launcher::ForegroundJob> start_foreground(const ForegroundArgs& args,
                                                          const CLI::App& app,
                                                          launcher::JobOrigin origin,
                                                          launcher::PlanOptions& options,
                                                          bool uses_gpus);

// With --resume, run from another directory than the job's: what to add to an error about the
// program given (not found here, where the job ran); empty otherwise. Call it before
// start_foreground (which takes the job up).
std::string resume_elsewhere_note(const ForegroundArgs& args, launcher::JobOrigin origin);

}  // namespace dlrun::cli
