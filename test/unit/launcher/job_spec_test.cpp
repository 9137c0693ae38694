#include "dlrun/launcher/job_spec.hpp"

#include <doctest/doctest.h>

#include <cstdlib>
#include <string>

#include "dlrun/error.hpp"
#include "dlrun/launcher/job_queue.hpp"
#include "dlrun/launcher/text.hpp"

using namespace dlrun::launcher;

namespace {
JobSpec parse(const std::string& text) { return parse_job_spec(text, "job.toml", "/jobs"); }

std::string error_of(const std::string& text) {
  try {
    parse(text);
  } catch (const dlrun::ConfigError& e) {
    return e.what();
  }
  return "";
}
}  // namespace

TEST_SUITE("launcher::JobSpec") {
  TEST_CASE("the minimal file from the docs is accepted as it is") {
    auto spec = parse(R"(name = "hello"
command = ["sh", "-c", "echo rank $RANK of $WORLD_SIZE"]
[resources]
nproc = 2
)");
    CHECK(spec.name == "hello");
    CHECK(spec.command == std::vector<std::string>{"sh", "-c", "echo rank $RANK of $WORLD_SIZE"});
    REQUIRE(spec.nproc);
    CHECK(spec.nproc->min == 2);
    CHECK(spec.nproc->max == 2);
    CHECK(spec.workdir == "/jobs");
    CHECK(spec.scheduler == "local");
    CHECK(spec.max_restarts == 0);
    CHECK(spec.grace == 30);
  }
  TEST_CASE("every key") {
    auto spec = parse(R"(name = "big"
command = ["./train", "--epochs", "3"]
workdir = "src"
max_restarts = 3
grace = 30
watchdog = 120.5
checkpoint_dir = "/ckpt"
log_dir = "logs"
[env]
NCCL_DEBUG = "INFO"
SEED = 7
[resources]
gpus = "2:4"
[scheduler]
kind = "local"
)");
    CHECK(spec.workdir == "/jobs/src");
    CHECK(spec.max_restarts == 3);
    CHECK(spec.grace == 30);
    CHECK(spec.watchdog == 120.5);
    CHECK(spec.checkpoint_dir == "/ckpt");
    CHECK(spec.log_dir == "/jobs/logs");
    CHECK(spec.env.at("NCCL_DEBUG") == "INFO");
    CHECK(spec.env.at("SEED") == "7");
    REQUIRE(spec.gpus);
    CHECK(spec.gpus->elastic());
    CHECK(spec.gpus->min == 2);
    CHECK(spec.ranks() == 4);
  }
  TEST_CASE("a list of GPUs asks for exactly those") {
    auto spec = parse("command = [\"x\"]\n[resources]\ngpus = [0, 2]\n");
    CHECK(spec.gpu_ids == std::vector<std::string>{"0", "2"});
    CHECK(spec.ranks() == 2);
    CHECK(spec.name == "x");
  }
  TEST_CASE("GPUs by number in a string, as on the command line") {
    const std::string head = "command = [\"x\"]\n[resources]\n";
    auto spec = parse(head + "gpus = \"3, 0,2\"\n");
    CHECK(spec.gpu_ids == std::vector<std::string>{"3", "0", "2"});
    CHECK(spec.ranks() == 3);
    CHECK_FALSE(spec.gpus->elastic());
    CHECK(error_of(head + "gpus = \"3\"\n") ==
          "job.toml:3:8: 'gpus' = \"3\": a count is a number (gpus = 3), one GPU by its number is a list (gpus = [3]), "
          "an elastic range is \"MIN:MAX\"");
    // dlrun local's spelling, or no number at all: the examples do not paste the value back.
    CHECK(error_of(head + "gpus = \"device=1\"\n") ==
          "job.toml:3:8: 'gpus' = \"device=1\": a count is a number (gpus = 1), one GPU by its number is a list "
          "(gpus = [1]), an elastic range is \"MIN:MAX\"");
    CHECK(error_of(head + "gpus = \"all\"\n") ==
          "job.toml:3:8: 'gpus' = \"all\": a count is a number (gpus = N), one GPU by its number is a list "
          "(gpus = [K]), an elastic range is \"MIN:MAX\"");
    CHECK(error_of(head + "gpus = 2.0\n") ==
          "job.toml:3:8: 'gpus' must be a count (2) or an elastic range (\"2:4\") or a list of GPUs ([0, 2]), not 2.0 "
          "(a count is written without a point: 2)");
    CHECK(error_of(head + "nproc = \"2\"\n") ==
          "job.toml:3:9: 'nproc' = \"2\": a count is a number (nproc = 2), an elastic range is \"MIN:MAX\" (\"2:4\")");
    CHECK(error_of("command = [\"t\"]\nmax_restarts = 1.0\n[resources]\nnproc = 1\n") ==
          "job.toml:2:16: 'max_restarts' must be a whole number, written without a point (max_restarts = 1)");
    CHECK(error_of("command = [\"t\"]\nmax_restarts = 1.5\n[resources]\nnproc = 1\n") == "job.toml:2:16: 'max_restarts' must be a whole number, not 1.5");
    CHECK(error_of(head + "gpus = 1.5\n") ==
          "job.toml:3:8: 'gpus' must be a count (2) or an elastic range (\"2:4\") or a list of GPUs ([0, 2]), not 1.5 "
          "(a count is a whole number)");
    CHECK(error_of(head + "gpus = \"0,x\"\n") == "job.toml:3:8: 'gpus' = \"0,x\": 'x' is not a GPU number (0, 1, …)");
    CHECK(error_of(head + "gpus = \"1,1\"\n") == "job.toml:3:8: GPU 1 is listed twice in 'gpus'");
  }
  TEST_CASE("a directory given as \".\" is the job file's own, without a trailing slash") {
    auto spec = parse("command = [\"x\"]\nworkdir = \".\"\nlog_dir = \"logs/\"\n[resources]\nnproc = 1\n");
    CHECK(spec.workdir == "/jobs");
    CHECK(spec.log_dir == "/jobs/logs");
  }
  TEST_CASE("a directory that starts with ~ is in HOME, ~user and variables are refused with why") {
    const char* saved = std::getenv("HOME");
    const std::string home = saved ? saved : "";
    ::setenv("HOME", "/home/ana", 1);
    auto spec = parse("command = [\"x\"]\nworkdir = \"~/proj\"\ncheckpoint_dir = \"~\"\n[resources]\nnproc = 1\n");
    CHECK(spec.workdir == "/home/ana/proj");
    CHECK(spec.checkpoint_dir == "/home/ana");
    CHECK(error_of("command = [\"x\"]\nlog_dir = \"~bob/logs\"\n[resources]\nnproc = 1\n") ==
          "job.toml:2:11: 'log_dir' = \"~bob/logs\": ~user is not expanded here; write the whole path");
    CHECK(error_of("command = [\"x\"]\ncheckpoint_dir = \"$SCRATCH/ckpt\"\n[resources]\nnproc = 1\n") ==
          "job.toml:2:18: 'checkpoint_dir' = \"$SCRATCH/ckpt\": variables are not expanded in job.toml; write "
          "the path itself (relative paths are relative to the job file)");
    CHECK(error_of("command = [\"x\"]\nworkdir = \"${HOME}/x\"\n[resources]\nnproc = 1\n") != "");
    CHECK(parse("command = [\"x\"]\nworkdir = \"/data/a$1\"\n[resources]\nnproc = 1\n").workdir == "/data/a$1");
    ::unsetenv("HOME");
    CHECK(error_of("command = [\"x\"]\nworkdir = \"~/proj\"\n[resources]\nnproc = 1\n").find("HOME is not set") !=
          std::string::npos);
    if (saved) ::setenv("HOME", home.c_str(), 1);
  }
  TEST_CASE("{job_id} in log_dir is refused: each job's logs have their own directory there already") {
    CHECK(error_of("command = [\"x\"]\nlog_dir = \"/logs/{job_id}\"\n[resources]\nnproc = 1\n") ==
          "job.toml:2:11: 'log_dir' = \"/logs/{job_id}\": each job's logs go to LOG_DIR/ID already (a directory per "
          "job): leave {job_id} out");
    CHECK(parse("command = [\"x\"]\nlog_dir = \"/logs\"\n[resources]\nnproc = 1\n").log_dir == "/logs");
  }
  TEST_CASE("a recorded job's ~ is its submitter's HOME, whoever reads it again") {
    JobRecord job;
    job.submitted.spec_text = "command = [\"x\"]\nlog_dir = \"~/logs\"\n[resources]\nnproc = 1\n";
    job.submitted.spec_path = "/jobs/job.toml";
    job.submitted.base_dir = "/jobs";
    job.submitted.environment = encode_environment({{"HOME", "/home/sub"}, {"PATH", "/bin"}});
    CHECK(submitted_spec(job).log_dir == "/home/sub/logs");
  }
  TEST_CASE("a misspelt key is reported with its position and a suggestion") {
    CHECK(error_of("command = [\"x\"]\n[resources]\nnproc = 1\ngpu = 2\n") ==
          "job.toml:4:1: unknown key 'gpu' in [resources] (did you mean 'gpus'?)");
    CHECK(error_of("comand = [\"x\"]\n[resources]\nnproc = 1\n") ==
          "job.toml:1:1: unknown key 'comand' (did you mean 'command'?)\n"
          "job.toml: missing required key 'command' (e.g. command = [\"./train\", \"--epochs\", \"3\"])");
    // A top-level key under a table: where it goes, not "did you mean 'command'?" for 'command'.
    CHECK(error_of("command = [\"x\"]\n[resources]\nnproc = 1\ncommand = [\"y\"]\n") ==
          "job.toml:4:1: unknown key 'command' in [resources] (it belongs at the top, before any [table])");
    // A key of another table: that table is named.
    CHECK(error_of("command = [\"x\"]\nnproc = 2\n[resources]\nnproc = 1\n") ==
          "job.toml:2:1: unknown key 'nproc' (it belongs in [resources])");
    CHECK(error_of("command = [\"x\"]\n[resources]\nnproc = 1\nkind = \"ssh\"\n") ==
          "job.toml:4:1: unknown key 'kind' in [resources] (it belongs in [scheduler])");
  }
  TEST_CASE("a string without quotes is said to need them") {
    CHECK(error_of("name = train # mine\ncommand = [\"x\"]\n[resources]\nnproc = 1\n") ==
          "job.toml:1:10: Error while parsing boolean: expected 'true', saw 'tra' (a string needs quotes: name = "
          "\"train\")");
    CHECK(error_of("command = [\"x\"]\n[resources]\nnproc = 1\n[scheduler]\nkind = ssh\n") ==
          "job.toml:5:8: Error while parsing value: could not determine value type (a string needs quotes: kind = "
          "\"ssh\")");
  }
  TEST_CASE("wrong types") {
    CHECK(error_of("command = \"./train\"\n[resources]\nnproc = 1\n") ==
          "job.toml:1:11: 'command' must be a non-empty array of strings, e.g. [\"python3\", \"train.py\"]");
    CHECK(error_of("command = [\"x\"]\ngrace = \"10\"\n[resources]\nnproc = 1\n") ==
          "job.toml:2:9: 'grace' must be a number, not a string");
    CHECK(error_of("command = [\"x\", 3]\n[resources]\nnproc = 1\n") ==
          "job.toml:1:17: 'command' items must be strings, not an integer");
  }
  TEST_CASE("bad ranges") {
    CHECK(error_of("command = [\"x\"]\n[resources]\nnproc = 0\n") ==
          "job.toml:3:9: 'nproc' = 0 is out of range: must be 1 to 100000");
    CHECK(error_of("command = [\"x\"]\n[resources]\nnproc = \"4:2\"\n") ==
          "job.toml:3:9: 'nproc' = \"4:2\": expected \"MIN:MAX\" with 1 <= MIN <= MAX <= 100000, e.g. \"2:4\"");
    CHECK(error_of("command = [\"x\"]\n[resources]\nnproc = \"1:99999999\"\n").find("<= 100000") != std::string::npos);
    CHECK(parse("command = [\"x\"]\n[resources]\nnproc = \"1:100000\"\n").nproc->max == 100000);
    CHECK_THROWS_AS(parse_count_range("1:99999999", "--nproc"), dlrun::ConfigError);
    CHECK_THROWS_WITH(parse_count_range("100001", "--nproc"), "--nproc 100001: at most 100000 ranks");
    CHECK(parse_count_range("2:100000", "--nproc") == std::pair<int, int>{2, 100000});
    CHECK(error_of("command = [\"x\"]\nmax_restarts = -1\n[resources]\nnproc = 1\n") ==
          "job.toml:2:16: 'max_restarts' = -1 is out of range: must be 0 to 1000000");
  }
  TEST_CASE("resources must say how many ranks, one way") {
    CHECK(error_of("command = [\"x\"]\n") ==
          "job.toml: missing [resources]: say nproc = N (CPU ranks) or gpus = N (one rank per GPU)");
    CHECK(error_of("command = [\"x\"]\n[resources]\nnproc = 1\ngpus = 1\n") ==
          "job.toml:4:8: give either nproc (CPU ranks) or gpus (one rank per GPU), not both");
  }
  TEST_CASE("scheduler kinds") {
    CHECK(error_of("command = [\"x\"]\n[resources]\nnproc = 1\n[scheduler]\nkind = \"slurmm\"\n") ==
          "job.toml:5:8: unknown scheduler kind 'slurmm' (did you mean 'slurm'?)");
    CHECK(error_of("command = [\"x\"]\n[resources]\nnproc = 1\n[scheduler]\nkind = \"slurm\"\n") ==
          "job.toml:2:1: with [scheduler] kind = \"slurm\" the ranks come from nodes and ranks_per_node (or "
          "gpus_per_node) in [scheduler]: remove [resources]");
  }
  TEST_CASE("a name in the file follows --name's rules") {
    CHECK(error_of("name = \"my job\"\ncommand = [\"x\"]\n[resources]\nnproc = 1\n")
              .find("job.toml:1:8: name 'my job': a name is letters, digits") == 0);
    CHECK(error_of("name = \"77\"\ncommand = [\"x\"]\n[resources]\nnproc = 1\n") ==
          "job.toml:1:8: name 77: a number is a job's number; add a letter");
    CHECK(error_of("name = \"-x\"\ncommand = [\"x\"]\n[resources]\nnproc = 1\n").find("job.toml:1:8: name '-x'") == 0);
    // A job recorded by an older dlrun keeps its name when its file is read again (cancel, run).
    CHECK(parse_job_spec("name = \"my job\"\ncommand = [\"x\"]\n[resources]\nnproc = 1\n", "job.toml", "/jobs", {},
                         true)
              .name == "my job");
  }
  TEST_CASE("--scheduler over a file: errors name the override, never a position the file lacks") {
    auto with_kind = [](const std::string& text, const std::string& kind) {
      try {
        parse_job_spec(text, "job.toml", "/jobs", kind);
      } catch (const dlrun::ConfigError& e) {
        return std::string(e.what());
      }
      return std::string();
    };
    CHECK(with_kind("command = [\"x\"]\n", "ssh") ==
          "job.toml: kind = \"ssh\" needs hosts = \"a:4,b:4\" or hostfile = \"FILE\" (one of them)");
    CHECK(with_kind("command = [\"x\"]\n[resources]\nnproc = 1\n", "slurm") ==
          "job.toml:2:1: with --scheduler slurm the ranks come from nodes and ranks_per_node (or gpus_per_node) in "
          "[scheduler]: remove [resources]");
  }
  TEST_CASE("kind ssh takes its ranks from hosts") {
    auto spec = parse("command = [\"x\"]\n[scheduler]\nkind = \"ssh\"\nhosts = \"a:2,b:2\"\ngpu = true\n");
    CHECK(spec.remote());
    CHECK(spec.hosts == "a:2,b:2");
    CHECK(spec.gpu_slots);
    CHECK(parse("command = [\"x\"]\n[scheduler]\nkind = \"ssh\"\nhostfile = \"hosts\"\n").hostfile == "/jobs/hosts");
    CHECK(error_of("command = [\"x\"]\n[scheduler]\nkind = \"ssh\"\n") ==
          "job.toml:2:1: kind = \"ssh\" needs hosts = \"a:4,b:4\" or hostfile = \"FILE\" (one of them)");
    CHECK(error_of("command = [\"x\"]\n[resources]\nnproc = 2\n[scheduler]\nkind = \"ssh\"\nhosts = \"a\"\n").find(
              "job.toml:2:1: with [scheduler] kind = \"ssh\" the ranks come from the hosts' slots") == 0);
    CHECK(error_of("command = [\"x\"]\n[scheduler]\nkind = \"ssh\"\nhosts = \"a:0\"\n").find("job.toml:4:9: --hosts a:0") == 0);
    CHECK(error_of("command = [\"x\"]\n[resources]\nnproc = 1\n[scheduler]\nhosts = \"a\"\n") ==
          "job.toml:5:9: 'hosts' is for kind = \"ssh\"");
    // What dlrun run takes as --remote-dlrun, --connect-timeout and --join-timeout.
    spec = parse("command = [\"x\"]\n[scheduler]\nkind = \"ssh\"\nhosts = \"a:2\"\nremote_dlrun = \"/opt/dlrun/bin/dlrun\"\n"
                 "connect_timeout = 3\njoin_timeout = 120.5\n");
    CHECK(spec.remote_dlrun == "/opt/dlrun/bin/dlrun");
    CHECK(spec.connect_timeout == 3.0);
    CHECK(spec.join_timeout == 120.5);
    CHECK_FALSE(parse("command = [\"x\"]\n[scheduler]\nkind = \"ssh\"\nhosts = \"a:2\"\n").join_timeout);
    CHECK(error_of("command = [\"x\"]\n[scheduler]\nkind = \"ssh\"\nhosts = \"a\"\njoin_timeout = -1\n").find(
              "job.toml:5:16:") == 0);
    CHECK(error_of("command = [\"x\"]\n[scheduler]\nkind = \"ssh\"\nhosts = [\"a:2\", \"b:2\"]\n") ==
          "job.toml:4:9: 'hosts' is one string, as dlrun run --hosts takes it: hosts = \"a:4,b:4\"");
  }
  TEST_CASE("kind slurm: nodes, ranks per node and sbatch settings") {
    auto spec = parse(R"(command = ["./train"]
[scheduler]
kind = "slurm"
partition = "gpu"
nodes = 2
gpus_per_node = 4
time_limit = "01:00:00"
account = "ml"
sbatch_options = ["--qos=high", "--exclusive"]
)");
    CHECK(spec.on_slurm());
    CHECK(spec.slurm.partition == "gpu");
    CHECK(spec.slurm.nodes == 2);
    CHECK(spec.slurm.gpus_per_node == 4);
    CHECK(spec.slurm.time_limit == "01:00:00");
    CHECK(spec.slurm.sbatch_options == std::vector<std::string>{"--qos=high", "--exclusive"});
    CHECK(error_of("command = [\"x\"]\n[scheduler]\nkind = \"slurm\"\nnodes = 0\n") ==
          "job.toml:4:9: 'nodes' = 0 is out of range: must be 1 to 100000");
    CHECK(error_of("command = [\"x\"]\n[resources]\nnproc = 1\n[scheduler]\nkind = \"local\"\npartition = \"gpu\"\n") ==
          "job.toml:6:13: 'partition' is for kind = \"slurm\"");
    CHECK(parse_job_spec("command = [\"x\"]\n", "job.toml", "/jobs", "slurm").on_slurm());
    // sbatch's --time forms, checked at submit (sbatch refused the rest: exit 69, "try again").
    const std::string slurm = "command = [\"x\"]\n[scheduler]\nkind = \"slurm\"\ntime_limit = ";
    for (const char* ok : {"90", "30:00", "01:00:00", "2-0", "2-12:30", "2-12:30:00", "unlimited", "INFINITE"}) {
      CHECK_MESSAGE(parse(slurm + "\"" + ok + "\"\n").slurm.time_limit == ok, ok);
    }
    for (const char* bad : {"forever", "", "1:2:3:4", "1h", "-5", "2-", "1::2", "2-1-1"}) {
      CHECK_MESSAGE(error_of(slurm + "\"" + bad + "\"\n").find("is not a time Slurm takes") != std::string::npos, bad);
    }
    // Every kind's, in seconds (local and ssh jobs are stopped by their supervisor); a number
    // is minutes, as sbatch takes it.
    const std::string local = "command = [\"x\"]\n[resources]\nnproc = 1\n[scheduler]\ntime_limit = ";
    const std::vector<std::pair<std::string, double>> seconds = {
        {"\"90\"", 5400},      {"90", 5400},           {"\"1:30\"", 90},      {"\"01:00:00\"", 3600},
        {"\"2-0\"", 172800},   {"\"1-2:03\"", 93780}, {"\"1-2:03:04\"", 93784}, {"\"UNLIMITED\"", 0}};
    for (const auto& [text, expected] : seconds) {
      CHECK_MESSAGE(parse(local + text + "\n").time_limit == expected, text);
    }
    CHECK(parse(slurm + "90\n").slurm.time_limit == "90");
    // A negative number of minutes is no time, not a string (it read "must be a string").
    CHECK(error_of(local + "-1\n") ==
          "job.toml:5:14: time_limit -1 is not a time Slurm takes: MINUTES (90), \"HH:MM:SS\", \"DAYS-HH:MM:SS\" "
          "(\"2-00:00:00\"), or \"UNLIMITED\"");
  }
  TEST_CASE("TOML syntax errors carry the position") {
    std::string e = error_of("command = [\"x\"\n");
    CHECK(e.rfind("job.toml:", 0) == 0);
    CHECK(e.find("job.toml:1:16: ") == 0);
    CHECK(e.find("end-of-file") != std::string::npos);
  }
  TEST_CASE("all problems are reported at once") {
    std::string e = error_of("nam = 1\ncommand = [\"x\"]\ngrace = -2\n[resources]\nnproc = 0\n");
    CHECK(e.find("unknown key 'nam'") != std::string::npos);
    CHECK(e.find("'grace' = -2 is out of range") != std::string::npos);
    CHECK(e.find("'nproc' = 0 is out of range") != std::string::npos);
  }
  TEST_CASE("limits: file size, depth, names, exec strings") {
    const std::string job = "command = [\"x\"]\n[resources]\nnproc = 1\n";
    CHECK(error_of(job + std::string(k_max_job_file_bytes, '#')) ==
          "job.toml: the job file is too large: at most 1048576 bytes are accepted");
    std::string header = "[a";
    for (int i = 0; i < 50000; ++i) header += ".a";
    CHECK(error_of(header + "]\n" + job) ==
          "job.toml:1:65: a key or table header with more than 32 dotted parts: not accepted in a job file");
    CHECK(error_of("name = \"" + std::string(256, 'n') + "\"\n" + job) ==
          "job.toml:1:8: 'name' is 256 bytes long: at most 255");
    CHECK(error_of(job + "[env]\nX = \"a\\u0000b\"\n") ==
          "job.toml:5:5: env 'X' holds a NUL byte (\\u0000): a program cannot be given one");
    CHECK(error_of(job + "[env]\nX = \"" + std::string(k_max_exec_string_bytes, 'v') + "\"\n") ==
          "job.toml:5:5: env 'X' is too long to pass to a program: 131073 bytes as X=value, at most 131071");
    CHECK(parse(job + "[env]\nX = \"" + std::string(k_max_exec_string_bytes - 2, 'v') + "\"\n").env.at("X").size() ==
          k_max_exec_string_bytes - 2);
  }
  TEST_CASE("durations are finite and at most a week") {
    const std::string job = "command = [\"x\"]\n[resources]\nnproc = 1\n";
    CHECK(error_of("grace = nan\n" + job) ==
          "job.toml:1:9: 'grace' = nan is out of range: must be a number of seconds from 0 to 604800");
    CHECK(error_of("watchdog = inf\n" + job) ==
          "job.toml:1:12: 'watchdog' = inf is out of range: must be a number of seconds from 0 to 604800");
    CHECK(error_of("grace = 9223372036854775807\n" + job).find("'grace' = inf is out of range") != std::string::npos);
    CHECK(parse("grace = 604800\n" + job).grace == 604800);
  }
  TEST_CASE("what reaches a shell or an #SBATCH line is one line, env names are variable names") {
    const std::string job = "command = [\"x\"]\n[scheduler]\nkind = \"slurm\"\n";
    CHECK(error_of(job + "partition = \"a\\nrm -rf ~\"\n") ==
          "job.toml:4:13: 'partition' must not contain control characters (a newline)");
    CHECK(error_of(job + "sbatch_options = [\"--x\", \"--y\\r\"]\n") ==
          "job.toml:4:26: 'sbatch_options' must not contain control characters (a carriage return)");
    CHECK(error_of("workdir = \"a\\tb\"\n" + job) ==
          "job.toml:1:11: 'workdir' must not contain control characters (a tab)");
    CHECK(error_of(job + "[env]\n\"A;B\" = 1\n").find("job.toml:5:1: 'A;B' is not a valid environment variable name") == 0);
    CHECK(error_of(job + "[env]\n1A = 1\n").find("'1A' is not a valid environment variable name") != std::string::npos);
    CHECK(parse(job + "[env]\n_a1 = 1\n").env.at("_a1") == "1");
  }
  TEST_CASE("[env] may not set what dlrun sets for each rank, which would override it unsaid") {
    const std::string job = "command = [\"x\"]\n[resources]\nnproc = 2\n";
    CHECK(error_of(job + "[env]\nRANK = 3\n") ==
          "job.toml:5:1: env 'RANK' is set by dlrun for each rank (docs/channels.md): remove it from [env]");
    CHECK(error_of(job + "[env]\nMASTER_PORT = \"29500\"\n").find("env 'MASTER_PORT' is set by dlrun") !=
          std::string::npos);
    CHECK(error_of(job + "[env]\nDLRUN_CHECKPOINT_DIR = \"/tmp/c\"\n") ==
          "job.toml:5:1: env 'DLRUN_CHECKPOINT_DIR' is set by dlrun: use checkpoint_dir = \"...\" for the job's "
          "checkpoint directory");
    // What dlrun only sets when it is missing, and CUDA_VISIBLE_DEVICES without gpus, stay the user's.
    CHECK(parse(job + "[env]\nOMP_NUM_THREADS = 1\nCUDA_VISIBLE_DEVICES = \"\"\n").env.size() == 2);
    const std::string gpu_job = "command = [\"x\"]\n[resources]\ngpus = 2\n";
    CHECK(error_of(gpu_job + "[env]\nCUDA_VISIBLE_DEVICES = \"1\"\n").find(
              "job.toml:5:24: env 'CUDA_VISIBLE_DEVICES' is set by dlrun for each rank of a job with gpus") == 0);
    // A job stored before this rule is still read (the supervisor runs what was queued).
    CHECK(dlrun::launcher::parse_job_spec(job + "[env]\nRANK = 3\n", "job.toml", "/tmp", "", true).env.at("RANK") ==
          "3");
    // A name taken from the program is made one (job_name_from), not refused.
    CHECK(parse("command = [\"./a\\nb\"]\n[resources]\nnproc = 1\n").name == "a_b");
    // The script an interpreter runs, as dlrun local names it (dlrun init --python's job was "python3").
    CHECK(parse("command = [\"python3\", \"-u\", \"src/train.py\"]\n[resources]\nnproc = 1\n").name == "train.py");
    CHECK(parse("command = [\"python3\", \"-m\", \"pkg.train\"]\n[resources]\nnproc = 1\n").name == "pkg.train");
  }
  TEST_CASE("the sharing policy: goodput for elastic GPU jobs unless said, and only where it can act") {
    const std::string head = "command = [\"x\"]\n";
    CHECK(parse(head + "[resources]\ngpus = \"1:4\"\n").policy == SharePolicy::goodput);
    CHECK(parse(head + "[resources]\ngpus = 2\n").policy == SharePolicy::fifo);
    CHECK(parse(head + "[resources]\nnproc = \"1:4\"\n").policy == SharePolicy::fifo);
    CHECK(parse(head + "[resources]\ngpus = [0, 1]\n").policy == SharePolicy::fifo);
    CHECK(parse(head + "[scheduler]\npolicy = \"fifo\"\n[resources]\ngpus = \"1:4\"\n").policy == SharePolicy::fifo);
    CHECK(parse(head + "[scheduler]\npolicy = \"goodput\"\n[resources]\ngpus = 2\n").policy ==
          SharePolicy::goodput);
    CHECK(error_of(head + "[scheduler]\npolicy = \"goodptu\"\n[resources]\ngpus = 2\n") ==
          "job.toml:3:10: unknown policy 'goodptu' (did you mean 'goodput'?)");
    CHECK(error_of(head + "[scheduler]\npolicy = \"goodput\"\n[resources]\nnproc = 2\n").find(
              "job.toml:3:10: policy = \"goodput\" shares GPUs") == 0);
    CHECK(error_of(head + "[scheduler]\npolicy = \"goodput\"\n[resources]\ngpus = [1]\n").find(
              "policy = \"goodput\" chooses the GPUs") != std::string::npos);
    CHECK(error_of(head + "[scheduler]\nkind = \"slurm\"\npolicy = \"fifo\"\n").find(
              "'policy' is for kind = \"local\"") != std::string::npos);
  }
}
