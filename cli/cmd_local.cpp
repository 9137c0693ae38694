// `dlrun local`: parse the options into PlanOptions and hand over to the launcher.

#include <fmt/format.h>

#include <algorithm>
#include <cstdlib>
#include <memory>
#include <string>
#include <vector>

#include "commands.hpp"
#include "dlrun/error.hpp"
#include "dlrun/launcher/command_resolution.hpp"
#include "dlrun/launcher/gpu_claims.hpp"
#include "dlrun/launcher/gpu_discovery.hpp"
#include "dlrun/launcher/plan.hpp"
#include "dlrun/launcher/process.hpp"
#include "dlrun/launcher/text.hpp"
#include "dlrun/log.hpp"
#include "foreground.hpp"
#include "group_options.hpp"

namespace dlrun::cli {
namespace {

struct LocalArgs {
  GroupArgs group;
  ForegroundArgs foreground;
  std::string nproc;
  std::string gpus;
  std::string gpu_binding = "rank";
  int master_port = 0;
  bool stdin_terminal = false;  // --stdin
  // torchrun's options for one machine, taken so that its command lines run as they are.
  std::string nnodes = "1", node_rank = "0", ignored;
};

// torchrun's --nnodes and --node_rank: dlrun local is one machine (dlrun run is several).
void check_one_machine(const LocalArgs& args) {
  if (args.nnodes != "1" && args.nnodes != "1:1") {
    throw ConfigError(fmt::format("--nnodes {}: dlrun local runs on this machine; for several, dlrun run --hosts "
                                  "a:N,b:N (docs/run.md)",
                                  args.nnodes));
  }
  if (args.node_rank != "0") {
    throw ConfigError(fmt::format("--node_rank {}: dlrun local runs on one machine, node 0; for several, dlrun "
                                  "run --hosts (docs/run.md)",
                                  args.node_rank));
  }
}

// torchrun's --nproc_per_node gpu|cpu|auto: one rank per GPU this process may use (torchrun's
// binding: each rank sees them all and picks cuda:LOCAL_RANK), or per usable core; auto: GPUs
// when there are any.
void apply_torchrun_count(const LocalArgs& args, const CLI::App& app, launcher::PlanOptions& options) {
  int gpus = 0;
  std::string why_none;
  if (args.nproc != "cpu") {
    const launcher::GpuInventory inventory = launcher::discover_gpus();
    gpus = inventory.count;
    why_none = inventory.error;
    if (const char* visible = std::getenv("CUDA_VISIBLE_DEVICES"); visible && gpus > 0) {
      int listed = 0;
      for (const auto& entry : launcher::split(visible, ',')) listed += launcher::trim(entry).empty() ? 0 : 1;
      gpus = std::min(gpus, listed);
      if (gpus == 0) why_none = "CUDA_VISIBLE_DEVICES is empty";
    }
  }
  if (args.nproc == "gpu" && gpus == 0) {
    throw ConfigError(fmt::format("--nproc_per_node gpu: no GPU here{}; --nproc N starts N CPU ranks",
                                  why_none.empty() ? "" : " (" + why_none + ")"));
  }
  if (gpus > 0) {
    options.gpus = launcher::GpuRequest{gpus, {}};
    if (!app.count("--gpu-binding")) options.gpu_binding = launcher::GpuBinding::all;
  } else {
    options.nproc = launcher::usable_cores();
  }
}

int run_local(LocalArgs& args, CLI::App& app, const Trailing& trailing) {
  apply_group_options(args.group, app, trailing);
  check_one_machine(args);
  auto& options = args.group.options;
  const bool torchrun_count = args.nproc == "gpu" || args.nproc == "cpu" || args.nproc == "auto";
  if (app.count("--nproc") && torchrun_count) {
    if (app.count("--gpus")) throw ConfigError(fmt::format("--nproc {} and --gpus: give one of them", args.nproc));
    apply_torchrun_count(args, app, options);
  } else if (app.count("--nproc")) {
    auto [min, max] = launcher::parse_count_range(args.nproc, "--nproc");
    options.nproc = max;
    if (min != max) options.min_ranks = min;
  }
  if (app.count("--gpus")) {
    if (args.gpus.find(':') != std::string::npos) {
      auto [min, max] = launcher::parse_count_range(args.gpus, "--gpus");
      options.gpus = launcher::GpuRequest{max, {}};
      if (min != max) options.min_ranks = min;
    } else {
      options.gpus = launcher::parse_gpu_request(args.gpus);
    }
  }
  if (!options.nproc && !options.gpus && !app.count("--resume")) {
    // `dlrun local ./train --nproc 2`: the count went to the program.
    const std::vector<std::string> counts{"--nproc", "--nproc-per-node", "--nproc_per_node", "--gpus"};
    if (auto fixed = misplaced_option(options.command, app, counts)) {
      throw ConfigError(fmt::format("say how many ranks to start: dlrun's options go before the program's name, "
                                    "and those after it are the program's: {}",
                                    *fixed));
    }
  }
  if (app.count("--master-port")) options.master_port = args.master_port;
  options.output_log = true;  // dlrun logs JOB: the terminal's lines, in their order
  options.rank0_stdin = true;  // `… | dlrun local`, `< data`: as under torchrun
  options.relay_terminal = args.stdin_terminal;  // breakpoint(), input() in a terminal
  if (!torchrun_count || app.count("--gpu-binding")) {
    options.gpu_binding =
        args.gpu_binding == "all" ? launcher::GpuBinding::all : launcher::GpuBinding::rank;
  }
  launcher::raise_fd_limit();
  if (const std::string elsewhere = resume_elsewhere_note(args.foreground, launcher::JobOrigin::local);
      !elsewhere.empty() && !options.command.empty()) {
    // A command line given with --resume runs here, not where the job ran: a program that is
    // not found here says so (checked before the job is taken up).
    const auto env = launcher::current_environment();
    try {
      launcher::resolve_command(options.command, env.count("PATH") ? env.at("PATH") : std::string());
    } catch (const ConfigError& e) {
      throw ConfigError(e.what() + elsewhere);
    }
  }
  auto record = start_foreground(args.foreground, app, launcher::JobOrigin::local, options,
                                 options.gpus.has_value());
  if (options.gpus && options.gpus->count)
    options.gpus_in_use = record->gpus_held_elsewhere(launcher::current_environment());
  auto job = launcher::make_plan(options, launcher::current_environment(), record->job_id());
  record->attach(job);
  // Its GPUs are claimed machine-wide while it runs, so that other users' dlrun leaves them be.
  auto claims = launcher::GpuClaims::for_job(launcher::current_environment(), record->job_id());
  if (auto shared = claims.hold(job.gpu_ids); !shared.empty()) log::warn("{}", launcher::sharing_warning(shared));
  try {
    return launcher::run_plan(job);
  } catch (const Error& e) {
    record->record_error(e.what(), e.exit_code());
    throw;
  }
}

}  // namespace

Command add_local_command(CLI::App& dlrun) {
  auto args = std::make_shared<LocalArgs>();
  CLI::App* app = dlrun.add_subcommand(
      "local",
      "Start the ranks of a training program on this machine.\n"
      "  dlrun local --nproc 2 ./train          two CPU ranks\n"
      "  dlrun local --gpus 4 ./train           one rank per GPU\n"
      "  dlrun local --nproc 2 train.py         any torch.distributed (env://) script, run with "
      "python3\n"
      "  dlrun local --nproc 2 -m pkg.train     a Python module: python3 -m pkg.train\n"
      "  dlrun local --resume 12                job 12 again, from its checkpoint (dlrun prints "
      "this when it stops)");
  app->prefix_command();
  set_usage(app,
            "dlrun local (--nproc N | --gpus N|LIST) [OPTIONS] [-m] [--] PROGRAM [ARGS...]\n"
            "       dlrun local --resume JOB [OPTIONS PROGRAM [ARGS...]]");
  auto& o = args->group.options;

  app->add_option(
         "--nproc,--nproc-per-node,--nproc_per_node", args->nproc,
         "Start N ranks (CPU; OMP_NUM_THREADS = cores / N); MIN:MAX for an elastic job that "
         "starts at MAX and may be resized (dlrun resize). As torchrun's --nproc_per_node: gpu (one "
         "rank per GPU, each seeing all and using cuda:LOCAL_RANK), cpu (one per core), auto (gpu "
         "when there are GPUs, else cpu)")
      ->type_name("N|MIN:MAX|gpu|cpu|auto");
  app->add_option("--gpus", args->gpus,
                  "One rank per GPU: a count (4) or GPU numbers as nvidia-smi shows them "
                  "(0,2,3; one GPU: device=3, since 3 alone is a count); each rank gets its own "
                  "CUDA_VISIBLE_DEVICES. MIN:MAX: elastic, starts with up to MAX free GPUs")
      ->type_name("N|LIST|MIN:MAX");
  app->add_option("--gpu-binding", args->gpu_binding,
                  "rank: each rank sees only its GPU (cuda:0); all: every rank sees the job's "
                  "GPUs and uses cuda:LOCAL_RANK, as under torchrun")
      ->check(CLI::IsMember({"rank", "all"}))
      ->capture_default_str();
  app->add_flag("--stdin", args->stdin_terminal,
                "Rank 0 reads this terminal: breakpoint() (pdb) and input() in rank 0 work, and what is typed "
                "while the job runs goes to rank 0. A pipe or file given to dlrun reaches rank 0 without it; the "
                "other ranks read /dev/null");
  app->add_option("--master-addr,--master_addr", o.master_addr,
                  "Address of the rendezvous (MASTER_ADDR)")
      ->capture_default_str();
  app->add_option("--master-port,--master_port", args->master_port,
                  "Port of the rendezvous (MASTER_PORT); default: a free port, new each restart")
      ->type_name("PORT");
  // torchrun's command lines for one machine (torchrun --standalone --nproc_per_node=N …).
  const std::string torchrun = "torchrun's, for one machine";
  app->add_flag("--standalone", "torchrun's: dlrun local always is (its own rendezvous on this machine)")
      ->group(torchrun);
  app->add_option("--nnodes", args->nnodes, "torchrun's: 1 (or 1:1); several machines are dlrun run's")
      ->type_name("1")
      ->group(torchrun);
  app->add_option("--node-rank,--node_rank", args->node_rank, "torchrun's: 0")->type_name("0")->group(torchrun);
  const std::pair<const char*, const char*> not_needed[] = {
      {"--rdzv-backend,--rdzv_backend", "torchrun's: taken, not needed (dlrun's own rendezvous)"},
      {"--rdzv-endpoint,--rdzv_endpoint", "torchrun's: taken, not needed (dlrun's own rendezvous)"},
      {"--rdzv-conf,--rdzv_conf", "torchrun's: taken, not needed (dlrun's own rendezvous)"},
      {"--monitor-interval,--monitor_interval", "torchrun's: taken, not needed (dlrun learns of an exit at once)"}};
  app->add_option("--rdzv-id,--rdzv_id", o.run_id,
                  "torchrun's: the ranks' TORCHELASTIC_RUN_ID (default: the job's number)")
      ->type_name("ID")
      ->group(torchrun);
  for (const auto& [names, help] : not_needed) {
    app->add_option(names, args->ignored, help)->type_name("X")->group(torchrun);
  }
  add_program_options(app, args->group);
  add_foreground_options(app, args->foreground);
  add_output_options(app, args->group);
  add_failure_options(app, args->group);
  app->footer(
      "PROGRAM ending in .py runs with python3 from PATH (as under torchrun; its #! line is not used). torchrun's --nproc_per_node, --master_addr, --master_port, --max_restarts "
      "work too, and its one-machine options are taken (--standalone, --nnodes 1, --rdzv_*).\n"
      "Every run is a job: dlrun status, logs, cancel and resize know it by the number it prints "
      "('dlrun: job 12: …'); after a stop or a failure, 'dlrun local --resume 12' runs it again in "
      "the same run "
      "directory, so a program that checkpoints there (the dlrun runtime does) continues.\n"
      "Each rank gets RANK LOCAL_RANK WORLD_SIZE LOCAL_WORLD_SIZE NODE_RANK GROUP_RANK "
      "MASTER_ADDR MASTER_PORT DLRUN_RUN_DIR DLRUN_RESTART_COUNT DLRUN_JOB_ID, torchrun's "
      "TORCHELASTIC_* "
      "GROUP_WORLD_SIZE ROLE_*, and OMP_NUM_THREADS unless set (docs/channels.md). A rank that "
      "fails with "
      "a TORCHELASTIC_ERROR_FILE (@record) is reported with its traceback.\n"
      "SIGINT, SIGTERM, SIGHUP and SIGQUIT stop the ranks (--grace); SIGUSR1 and SIGUSR2 are passed on to "
      "each rank and the job goes on (docs/local.md#signals).\n"
      "Exit code: 0, or the failing rank's own code (128+N if killed by signal N), "
      "130/143/129/131 after SIGINT/SIGTERM/SIGHUP/SIGQUIT, 2 for bad usage (docs/exit-codes.md).");
  return {app, [args, app](const Trailing& trailing) { return run_local(*args, *app, trailing); }};
}

}  // namespace dlrun::cli
