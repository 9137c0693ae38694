#include "dlrun/launcher/ssh.hpp"

#include <poll.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>

#include <fmt/format.h>

#include "dlrun/error.hpp"
#include "dlrun/launcher/escaped_processes.hpp"
#include "dlrun/launcher/exit_status.hpp"
#include "dlrun/launcher/process.hpp"
#include "dlrun/launcher/text.hpp"
#include "dlrun/protocol.hpp"

namespace dlrun::launcher {

std::vector<std::string> ssh_argv(const SshSettings& ssh, const std::string& host) {
  std::vector<std::string> argv = {ssh.program};
  if (!ssh.config_file.empty()) argv.insert(argv.end(), {"-F", ssh.config_file});
  int timeout = std::max(1, static_cast<int>(ssh.connect_timeout_seconds));
  // ssh takes the first value it is given of each: never a password prompt (BatchMode), then
  // the user's options, then dlrun's defaults, which theirs replace.
  argv.insert(argv.end(), {"-o", "BatchMode=yes"});
  for (const auto& option : ssh.options) argv.insert(argv.end(), {"-o", option});
  for (std::string option : {fmt::format("ConnectTimeout={}", timeout), std::string("ServerAliveInterval=1"),
                             std::string("ServerAliveCountMax=3")}) {
    argv.insert(argv.end(), {"-o", option});
  }
  argv.push_back(host);
  return argv;
}

std::string shell_quote(const std::string& word) {
  if (!word.empty() && word.find_first_not_of("abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789-_./=:@,+%") ==
                           std::string::npos) {
    return word;
  }
  std::string out = "'";
  for (char c : word) {
    if (c == '\'') out += "'\\''";
    else out += c;
  }
  return out + "'";
}

std::optional<std::string> address_seen_by(const Host& host, const SshSettings& ssh, const Environment& env) {
  auto path_it = env.find("PATH");
  const std::string ssh_path = resolve_program(ssh.program, path_it == env.end() ? "" : path_it->second);
  auto argv = ssh_argv(ssh, host.name);
  argv.push_back("echo \"$SSH_CONNECTION\"");
  const CommandResult result = run_and_capture(ssh_path, argv, env, ssh.connect_timeout_seconds + 5);
  if (!result.status.success()) return std::nullopt;
  const auto words = split(std::string(trim(result.out)), ' ');
  if (words.empty() || words.front().empty()) return std::nullopt;
  return words.front();
}

void check_ssh_options(const SshSettings& ssh, const std::string& host, const Environment& env) {
  if (ssh.options.empty() && ssh.config_file.empty()) return;
  auto path_it = env.find("PATH");
  const std::string ssh_path = resolve_program(ssh.program, path_it == env.end() ? "" : path_it->second);
  auto argv = ssh_argv(ssh, host);
  argv.insert(argv.begin() + 1, "-G");
  const CommandResult result = run_and_capture(ssh_path, argv, env, 10);
  if (result.status.success()) return;
  std::string error(trim(result.err));
  auto newline = error.rfind('\n');
  if (newline != std::string::npos) error = error.substr(newline + 1);
  std::string given;
  for (const auto& option : ssh.options) given += fmt::format(" --ssh-option {}", shell_quote(option));
  if (!ssh.config_file.empty()) given += " --ssh-config " + shell_quote(ssh.config_file);
  throw ConfigError(fmt::format("ssh refuses{}: {} (checked with ssh -G; nothing was started)", given,
                                error.empty() ? "ssh " + result.status.describe() : error));
}

std::vector<std::string> check_hosts(const std::vector<Host>& hosts, const SshSettings& ssh, const Environment& env) {
  for (const auto& host : hosts) {
    if (!host.local) {
      check_ssh_options(ssh, host.name, env);
      break;
    }
  }
  struct Probe {
    const Host* host;
    SpawnedProcess process;
    std::string output;
    std::optional<ExitStatus> status;
  };
  auto path_it = env.find("PATH");
  std::string ssh_path = resolve_program(ssh.program, path_it == env.end() ? "" : path_it->second);
  std::vector<Probe> probes;
  // What a probe's ssh starts (a ProxyCommand, in a session of its own) carries this mark,
  // by which it is found and killed when the probe is given up (escaped_processes.hpp).
  const std::string token = fmt::format("{}-probe", supervisor_token(ProcessIdentity::self()));
  Environment probe_env = env;
  probe_env[env::k_supervisor_id] = token;
  for (const auto& host : hosts) {
    if (host.local) continue;
    auto argv = ssh_argv(ssh, host.name);
    argv.push_back("true");
    Probe probe{&host, spawn_process({ssh_path, argv, probe_env, "", std::nullopt}), "", std::nullopt};
    await_exec(probe.process, ssh.program);
    probes.push_back(std::move(probe));
  }
  auto deadline = std::chrono::steady_clock::now() + std::chrono::duration<double>(ssh.connect_timeout_seconds + 5);
  size_t open_pipes = probes.size() * 2;
  while (open_pipes > 0 && std::chrono::steady_clock::now() < deadline && !stop_signal_pending()) {
    std::vector<pollfd> fds;
    for (auto& p : probes) {
      for (int fd : {p.process.stdout_fd, p.process.stderr_fd}) {
        if (fd >= 0) fds.push_back({fd, POLLIN, 0});
      }
    }
    ::poll(fds.data(), fds.size(), 100);
    for (auto& p : probes) {
      for (int* fd : {&p.process.stdout_fd, &p.process.stderr_fd}) {
        if (*fd < 0) continue;
        pollfd one{*fd, POLLIN, 0};
        if (::poll(&one, 1, 0) <= 0) continue;
        char chunk[1024];
        ssize_t n = ::read(*fd, chunk, sizeof chunk);
        if (n > 0) {
          if (p.output.size() < 4096) p.output.append(chunk, static_cast<size_t>(n));
        } else {
          ::close(*fd);
          *fd = -1;
          --open_pipes;
        }
      }
    }
  }
  std::vector<std::string> failures;
  bool given_up = false;
  for (auto& p : probes) {
    for (int fd : {p.process.stdout_fd, p.process.stderr_fd}) {
      if (fd >= 0) ::close(fd);
    }
    auto reaped = wait_for_exit(p.process.pid, std::chrono::time_point_cast<std::chrono::steady_clock::duration>(deadline));
    if (!reaped) {
      int status = 0;
      ::kill(-p.process.pid, SIGKILL);
      ::waitpid(p.process.pid, &status, 0);
      given_up = true;
      failures.push_back(fmt::format("{}: no answer within {:g} s", p.host->name, ssh.connect_timeout_seconds + 5));
      continue;
    }
    auto exit = ExitStatus::from_wait_status(*reaped);
    if (exit.success()) continue;
    std::string error(trim(p.output));
    auto newline = error.rfind('\n');
    if (newline != std::string::npos) error = error.substr(newline + 1);  // ssh's last word is its reason
    failures.push_back(fmt::format("{}: {}", p.host->name, error.empty() ? "ssh " + exit.describe() : error));
  }
  if (given_up || !failures.empty()) kill_processes_with_token(token);
  return failures;
}

}  // namespace dlrun::launcher
