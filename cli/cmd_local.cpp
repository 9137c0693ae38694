// `dlrun local`: parse the options into LocalJobOptions and hand over to the launcher.

#include <memory>
#include <string>
#include <vector>

#include <fmt/format.h>

#include "commands.hpp"
#include "dlrun/launcher/error.hpp"
#include "dlrun/launcher/local_job.hpp"
#include "dlrun/launcher/process.hpp"
#include "dlrun/launcher/text.hpp"

namespace dlrun::cli {
namespace {

struct LocalArgs {
  launcher::LocalJobOptions options;
  int nproc = 0;
  std::string gpus;
  std::string ranks;
  std::string color = "auto";
  std::string gpu_binding = "rank";
  int master_port = 0;
  bool no_prefix = false;
};

int run_local(LocalArgs& args, CLI::App& app, const Trailing& trailing) {
  auto& options = args.options;
  options.command = program_words(app, trailing);
  if (app.count("--nproc")) options.nproc = args.nproc;
  if (app.count("--gpus")) options.gpus = args.gpus;
  if (app.count("--master-port")) options.master_port = args.master_port;
  if (app.count("--ranks")) options.shown_ranks = launcher::parse_int_list(args.ranks, "--ranks");
  options.prefix_enabled = !args.no_prefix;
  options.color = args.color == "always" ? launcher::ColorMode::always
                  : args.color == "never" ? launcher::ColorMode::never
                                          : launcher::ColorMode::automatic;
  options.gpu_binding = args.gpu_binding == "all" ? launcher::GpuBinding::all : launcher::GpuBinding::rank;
  launcher::raise_fd_limit();
  auto job = launcher::prepare_local_job(options, launcher::current_environment());
  return launcher::run_local_job(job);
}

}  // namespace

Command add_local_command(CLI::App& dlrun) {
  auto args = std::make_shared<LocalArgs>();
  CLI::App* app = dlrun.add_subcommand(
      "local",
      "Start the ranks of a training program on this machine.\n"
      "  dlrun local --nproc 2 ./train          two CPU ranks\n"
      "  dlrun local --gpus 4 ./train           one rank per GPU\n"
      "  dlrun local --nproc 2 python3 train.py any torch.distributed (env://) script");
  app->prefix_command();
  set_usage(app, "dlrun local (--nproc N | --gpus N|LIST) [OPTIONS] [--] PROGRAM [ARGS...]");
  auto& o = args->options;

  app->add_option("--nproc", args->nproc, "Start N ranks (CPU; OMP_NUM_THREADS = cores / N)")
      ->type_name("N");
  app->add_option("--gpus", args->gpus,
                  "One rank per GPU: a count (4) or GPU numbers as nvidia-smi shows them "
                  "(0,2,3); each rank gets its own CUDA_VISIBLE_DEVICES")
      ->type_name("N|LIST");
  app->add_option("--gpu-binding", args->gpu_binding,
                  "rank: each rank sees only its GPU (cuda:0); all: every rank sees the job's "
                  "GPUs and uses cuda:LOCAL_RANK, as under torchrun")
      ->check(CLI::IsMember({"rank", "all"}))
      ->capture_default_str();
  app->add_option("--master-addr", o.master_addr, "Address of the rendezvous (MASTER_ADDR)")
      ->capture_default_str();
  app->add_option("--master-port", args->master_port,
                  "Port of the rendezvous (MASTER_PORT); default: a free port, new each restart")
      ->type_name("PORT");
  app->add_option("--run-dir", o.run_dir,
                  "Directory for rank-N.log, job.json and the runtime's files "
                  "(default: $DLRUN_HOME/runs/JOB_ID, DLRUN_HOME=~/.local/state/dlrun)")
      ->type_name("DIR");
  app->add_option("--prefix", o.prefix,
                  "Template before each output line: {rank} {local_rank} {node_rank} {host} "
                  "{world_size}")
      ->capture_default_str();
  app->add_flag("--no-prefix", args->no_prefix, "Print ranks' lines without a prefix");
  app->add_option("--ranks", args->ranks,
                  "Show only these ranks on the terminal, e.g. 0 or 0,3 or 0-3 (all are logged)")
      ->type_name("LIST");
  app->add_option("--color", args->color, "Colour the prefixes: auto (on a terminal, unless NO_COLOR), always, never")
      ->check(CLI::IsMember({"auto", "always", "never"}))
      ->capture_default_str();
  app->add_option("--grace", o.grace_seconds,
                  "Seconds between SIGTERM and SIGKILL when stopping ranks")
      ->type_name("SECONDS")
      ->capture_default_str();
  app->add_option("--max-restarts", o.max_restarts,
                  "Restart the whole group up to K times after a rank fails (counted for the job)")
      ->type_name("K")
      ->capture_default_str();
  app->add_option("--tail", o.tail_lines, "Lines of a failed rank's stderr to show")
      ->type_name("N")
      ->capture_default_str();
  app->add_flag("-q,--quiet", o.quiet, "Print only errors from dlrun itself");
  app->footer(
      "Each rank gets RANK LOCAL_RANK WORLD_SIZE LOCAL_WORLD_SIZE NODE_RANK GROUP_RANK "
      "MASTER_ADDR MASTER_PORT DLRUN_RUN_DIR DLRUN_RESTART_COUNT DLRUN_JOB_ID, and "
      "OMP_NUM_THREADS unless set (docs/channels.md).\n"
      "Exit code: 0, or the failing rank's own code (128+N if killed by signal N), "
      "130/143 after SIGINT/SIGTERM, 2 for bad usage (docs/exit-codes.md).");
  return {app, [args, app](const Trailing& trailing) { return run_local(*args, *app, trailing); }};
}

}  // namespace dlrun::cli
