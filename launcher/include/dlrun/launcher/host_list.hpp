#pragma once
// The machines of a multi-host job: `--hosts a:4,b:4` or a hostfile in the format of
// Open MPI and the DeepSpeed launcher (`host slots=N`, `#` comments). Pure, thread-safe.

#include <string>
#include <string_view>
#include <vector>

namespace dlrun::launcher {

struct Host {
  std::string name;  // as given, possibly user@host; used for ssh and in prefixes
  int slots = 1;     // ranks on this host
  bool local = false;  // this machine: started without ssh
};

// "a:4,b:4,user@c" (slots default to 1); this machine's IPv6 loopback as "[::1]:2". Host
// names are not case-sensitive: an entry listed twice in another case is refused as a
// duplicate. Throws ConfigError naming the bad entry.
std::vector<Host> parse_host_list(std::string_view text);

// Hostfile text; `path` is used in messages (path:LINE: …).
std::vector<Host> parse_hostfile(std::string_view text, const std::string& path);

// Marks hosts that name this machine (localhost, 127.x, ::1, or one of `own_names`, in any
// case). A user@host entry is never local: it logs in as that user.
void mark_local_hosts(std::vector<Host>& hosts, const std::vector<std::string>& own_names);

// The host part of "user@host".
std::string host_part(const std::string& name);

}  // namespace dlrun::launcher
