#pragma once
// Reaching other machines with OpenSSH's client: the command line dlrun uses (never
// interactive: BatchMode, a connect timeout, keep-alives so a vanished host is noticed
// within seconds), shell quoting for the remote command, and the check of every host
// before anything starts. Not thread-safe (the check forks).

#include <optional>
#include <string>
#include <vector>

#include "dlrun/launcher/host_list.hpp"
#include "dlrun/launcher/rank_env.hpp"

namespace dlrun::launcher {

struct SshSettings {
  std::string program = "ssh";
  std::string config_file;               // -F
  std::vector<std::string> options;      // each becomes -o OPTION
  double connect_timeout_seconds = 10;
};

// ssh's argv up to and including the host, ready for the remote command.
std::vector<std::string> ssh_argv(const SshSettings& ssh, const std::string& host);
// This machine's address as `host` sees it over ssh (the first word of its $SSH_CONNECTION);
// nullopt when ssh does not say.
std::optional<std::string> address_seen_by(const Host& host, const SshSettings& ssh, const Environment& env);

// `word` quoted for a POSIX shell (the remote side of ssh runs one).
std::string shell_quote(const std::string& word);

// ConfigError when ssh refuses the user's --ssh-option or -F file (a misspelt option, a bad
// value): `ssh -G` reads them without connecting, so a typo is not reported as every host being
// unreachable. Nothing to check (no options, no file): returns at once.
void check_ssh_options(const SshSettings& ssh, const std::string& host, const Environment& env);

// Runs `ssh HOST true` for every remote host at once (after check_ssh_options); returns "host: ssh's error" for
// each host that cannot be reached (empty: all reachable).
std::vector<std::string> check_hosts(const std::vector<Host>& hosts, const SshSettings& ssh,
                                     const Environment& env);

}  // namespace dlrun::launcher
