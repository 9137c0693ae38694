#include "dlrun/launcher/slurm.hpp"

#include <csignal>
#include <cstdio>
#include <ctime>
#include <map>
#include <sstream>

#include <fmt/format.h>

#include "dlrun/error.hpp"
#include "dlrun/launcher/process.hpp"
#include "dlrun/launcher/ssh.hpp"
#include "dlrun/launcher/text.hpp"
#include "dlrun/protocol.hpp"

namespace dlrun::launcher {
namespace {

std::string run_slurm_command(const std::vector<std::string>& argv, const Environment& env, bool must_succeed) {
  auto path_it = env.find("PATH");
  std::string path = resolve_program(argv[0], path_it == env.end() ? "" : path_it->second);
  CommandResult result = run_and_capture(path, argv, env, 60);
  if (must_succeed && !result.status.success()) {
    std::string why(trim(result.err));
    throw Error(fmt::format("{} {}: {}", argv[0], result.status.describe(), why.empty() ? std::string(trim(result.out)) : why),
                exit_code::k_unavailable);
  }
  return result.status.success() ? result.out : std::string();
}

// One #SBATCH line's option as sbatch reads it back: sbatch splits the line at blanks, groups
// with quotes, takes \\ as an escape and # as the start of a comment. A newline cannot be
// quoted (it would end the comment line and start a shell command): the job file's checks
// refuse them, and this refuses them again.
const std::string& one_sbatch_line(const std::string& option) {
  auto end = option.find_first_of(std::string("\r\n\0", 3));
  if (end != std::string::npos) {
    throw ConfigError(fmt::format("cannot write an #SBATCH line holding a newline: {}…", option.substr(0, end)));
  }
  return option;
}

std::string sbatch_quote(const std::string& option) {
  one_sbatch_line(option);
  if (option.find_first_of(" \t\"'\\#") == std::string::npos) return option;
  std::string out = "\"";
  for (char c : option) {
    if (c == '"' || c == '\\') out += '\\';
    out += c;
  }
  return out + "\"";
}

}  // namespace

std::string render_sbatch_script(const JobSpec& spec, const SbatchInput& in) {
  const SlurmSpec& s = spec.slurm;
  std::string script = fmt::format(
      "#!/bin/bash\n"
      "# Written by dlrun for its job {} ({}); see docs/slurm.md. One task per node: the\n"
      "# batch step serves the rendezvous and starts one dlrun agent per node with srun.\n",
      in.job_id, spec.name);
  auto line = [&](const std::string& option) { script += "#SBATCH " + sbatch_quote(option) + "\n"; };
  line("--job-name=" + spec.name);
  line(fmt::format("--nodes={}", s.nodes));
  line("--ntasks-per-node=1");
  // The one task per node is the agent; its ranks need a CPU each (Slurm gave it one, and two
  // jobs of 2 ranks ran at once on a 2-CPU node).
  const int ranks_per_node = s.gpus_per_node > 0 ? s.gpus_per_node : s.ranks_per_node;
  line(fmt::format("--cpus-per-task={}", ranks_per_node));
  if (s.gpus_per_node > 0) line(fmt::format("--gpus-per-node={}", s.gpus_per_node));
  if (!s.partition.empty()) line("--partition=" + s.partition);
  if (!s.time_limit.empty()) line("--time=" + s.time_limit);
  if (!s.account.empty()) line("--account=" + s.account);
  line("--output=" + in.log_dir + "/output.log");
  line("--chdir=" + spec.workdir);
  for (const auto& option : s.sbatch_options) script += "#SBATCH " + one_sbatch_line(option) + "\n";  // verbatim
  for (const auto& [key, value] : spec.env) script += fmt::format("export {}={}\n", key, shell_quote(value));
  script += fmt::format("export {}={}\n", env::k_checkpoint_dir, shell_quote(in.checkpoint_dir));
  std::vector<std::string> args = {in.dlrun, "_slurm-run", "--job-id", in.job_id, "--workdir", spec.workdir,
                                   "--run-dir", in.run_dir,
                                   "--grace", fmt::format("{}", spec.grace), "--max-restarts",
                                   std::to_string(spec.max_restarts)};
  if (spec.watchdog > 0) args.insert(args.end(), {"--watchdog", fmt::format("{}", spec.watchdog)});
  if (in.log_dir != in.run_dir) args.insert(args.end(), {"--log-dir", in.log_dir});
  if (s.gpus_per_node > 0) {
    args.insert(args.end(), {"--gpu", "--ranks-per-node", std::to_string(s.gpus_per_node)});
  } else {
    args.insert(args.end(), {"--ranks-per-node", std::to_string(s.ranks_per_node)});
  }
  args.push_back("--");
  args.insert(args.end(), spec.command.begin(), spec.command.end());
  script += "exec";
  for (const auto& a : args) script += " " + shell_quote(a);
  return script + "\n";
}

JobState map_slurm_state(std::string_view state) {
  // "CANCELLED by 0" and "COMPLETED+" carry extra words.
  std::string s(state.substr(0, state.find_first_of(" +")));
  if (s == "PENDING" || s == "CONFIGURING" || s == "REQUEUED" || s == "REQUEUE_HOLD" || s == "RESV_DEL_HOLD" ||
      s == "SUSPENDED" || s == "STOPPED") {
    return JobState::pending;
  }
  if (s == "RUNNING" || s == "COMPLETING" || s == "SIGNALING" || s == "STAGE_OUT" || s == "RESIZING") {
    return JobState::running;
  }
  if (s == "COMPLETED") return JobState::succeeded;
  if (s == "CANCELLED" || s == "REVOKED") return JobState::cancelled;
  return JobState::failed;  // FAILED TIMEOUT NODE_FAIL OUT_OF_MEMORY BOOT_FAIL DEADLINE PREEMPTED SPECIAL_EXIT
}

namespace {

// Unix seconds (SLURM_TIME_FORMAT=%s, as dlrun asks scontrol), or "2026-11-29T06:22:43" in
// local time (scontrol's default, in its own time zone); "Unknown", "None": nothing.
std::optional<double> slurm_time(const std::string& text) {
  if (auto seconds = parse_int(text); seconds && *seconds > 0) return static_cast<double>(*seconds);
  std::tm tm{};
  if (std::sscanf(text.c_str(), "%d-%d-%dT%d:%d:%d", &tm.tm_year, &tm.tm_mon, &tm.tm_mday, &tm.tm_hour, &tm.tm_min,
                  &tm.tm_sec) != 6) {
    return std::nullopt;
  }
  tm.tm_year -= 1900;
  tm.tm_mon -= 1;
  tm.tm_isdst = -1;
  const std::time_t t = std::mktime(&tm);
  if (t <= 0) return std::nullopt;
  return static_cast<double>(t);
}

}  // namespace

std::string slurm_never_hint(const std::string& reason) {
  if (reason == "PartitionNodeLimit") return "it asks for more nodes than its partition allows";
  if (reason == "PartitionTimeLimit") return "its time_limit is above its partition's";
  if (reason == "PartitionConfig") return "its request does not fit its partition (CPUs, GPUs or memory of a node)";
  if (reason == "BadConstraints") return "no node has what it asks for";
  if (reason == "InvalidAccount" || reason == "InvalidQOS") return "its account or QOS is not valid";
  return {};
}

std::optional<SlurmJobInfo> parse_scontrol_job(std::string_view line) {
  std::map<std::string, std::string> fields;
  std::istringstream in{std::string(line)};
  std::string word;
  while (in >> word) {
    auto eq = word.find('=');
    if (eq != std::string::npos) fields[word.substr(0, eq)] = word.substr(eq + 1);
  }
  if (!fields.count("JobState")) return std::nullopt;
  SlurmJobInfo info;
  info.slurm_state = fields["JobState"];
  info.state = map_slurm_state(info.slurm_state);
  if (info.state != JobState::pending && fields.count("StartTime")) info.started_at = slurm_time(fields["StartTime"]);
  if (is_terminal(info.state) && fields.count("ExitCode")) {
    // "CODE:SIGNAL" of the batch script.
    const std::string& ec = fields["ExitCode"];
    auto colon = ec.find(':');
    auto code = parse_int(ec.substr(0, colon));
    auto sig = colon == std::string::npos ? std::optional<int>(0) : parse_int(ec.substr(colon + 1));
    if (code && sig) info.exit_code = *sig > 0 ? exit_code::k_signal_base + *sig : *code;
  }
  if (info.state == JobState::cancelled) {
    // Cancelled before it ran, Slurm says 0:0 and keeps its pending reason (BeginTime): a
    // cancelled job exits 143 (docs/exit-codes.md), and its reason is that it was cancelled.
    if (!info.exit_code || *info.exit_code == 0) info.exit_code = exit_code::k_signal_base + SIGTERM;
    info.reason = "Slurm: " + info.slurm_state;
    return info;
  }
  if (fields.count("Reason") && fields["Reason"] != "None") info.reason = fields["Reason"];
  if (info.state != JobState::succeeded && info.state != JobState::pending && info.reason.empty()) {
    info.reason = "Slurm: " + info.slurm_state;
  }
  return info;
}

int64_t slurm_submit(const std::string& script_path, const Environment& env) {
  std::string out = run_slurm_command({"sbatch", "--parsable", script_path}, env, true);
  auto id = parse_int(trim(out.substr(0, out.find(';'))));  // "ID" or "ID;cluster"
  if (!id) throw Error(fmt::format("sbatch printed no job id: {}", trim(out)), exit_code::k_unavailable);
  return *id;
}

SlurmAnswer interpret_slurm_query(const SlurmCommandResult& scontrol, const std::optional<SlurmCommandResult>& sacct) {
  SlurmAnswer answer;
  auto words = [](const SlurmCommandResult& r) {
    return std::string(trim(r.err.empty() ? r.out : r.err));
  };
  if (scontrol.ran) {
    answer.info = parse_scontrol_job(scontrol.out);
    if (!answer.info) answer.why = "scontrol printed no job state: " + words(scontrol);
    return answer;
  }
  if (words(scontrol).find("Invalid job id") == std::string::npos) {
    answer.why = words(scontrol).empty() ? std::string("scontrol failed") : words(scontrol);
    return answer;  // the controller could not answer: nothing is known
  }
  // Gone from slurmctld's memory (MinJobAge): the accounting database, if there is one.
  if (!sacct) {
    answer.gone = true;
    return answer;
  }
  if (!sacct->ran) {
    const std::string said = words(*sacct);
    // No accounting at all: that is Slurm's last word on the job.
    if (said.find("disabled") != std::string::npos || said.find("not configured") != std::string::npos ||
        said.find("not found in PATH") != std::string::npos) {
      answer.gone = true;
    } else {
      answer.why = said.empty() ? std::string("sacct failed") : said;
    }
    return answer;
  }
  const std::string& out = sacct->out;
  const auto bar = out.find('|');
  if (bar == std::string::npos) {
    answer.gone = true;
    return answer;
  }
  std::string state(trim(out.substr(0, bar)));
  std::string exit(trim(out.substr(bar + 1)));
  answer.info = parse_scontrol_job(fmt::format("JobState={} ExitCode={}", state, exit.substr(0, exit.find('\n'))));
  if (!answer.info) answer.why = "sacct printed no job state: " + std::string(trim(out));
  return answer;
}

namespace {

SlurmCommandResult run_for_answer(const std::vector<std::string>& argv, const Environment& env) {
  SlurmCommandResult result;
  try {
    auto path_it = env.find("PATH");
    const std::string path = resolve_program(argv[0], path_it == env.end() ? "" : path_it->second);
    CommandResult r = run_and_capture(path, argv, env, 60);
    result.ran = r.status.success();
    result.out = r.out;
    result.err = r.err.empty() && !r.status.success() ? r.status.describe() : r.err;
  } catch (const Error& e) {  // not in PATH, cannot be started
    result.err = e.what();
  }
  return result;
}

}  // namespace

SlurmAnswer slurm_query(int64_t slurm_id, const Environment& env) {
  const std::string id = std::to_string(slurm_id);
  // Times as Unix seconds: its own time zone and format are not dlrun's to guess.
  Environment seconds = env;
  seconds["SLURM_TIME_FORMAT"] = "%s";
  SlurmCommandResult scontrol = run_for_answer({"scontrol", "show", "job", "-o", id}, seconds);
  std::optional<SlurmCommandResult> sacct;
  if (!scontrol.ran && scontrol.err.find("Invalid job id") != std::string::npos) {
    sacct = run_for_answer({"sacct", "-n", "-X", "-P", "-o", "State,ExitCode", "-j", id}, env);
  }
  return interpret_slurm_query(scontrol, sacct);
}

void slurm_cancel(int64_t slurm_id, bool force, const Environment& env) {
  std::vector<std::string> argv = {"scancel"};
  if (force) argv.push_back("--signal=KILL");
  argv.push_back(std::to_string(slurm_id));
  run_slurm_command(argv, env, true);
}

void slurm_signal(int64_t slurm_id, int signal, const Environment& env) {
  run_slurm_command({"scancel", fmt::format("--signal={}", signal), "--batch", std::to_string(slurm_id)}, env, true);
}

}  // namespace dlrun::launcher
