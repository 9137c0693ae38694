#pragma once
// A member: one process the Supervisor runs in an attempt, and the program it runs. A
// member is a rank (dlrun local, an agent) or a whole node (dlrun run, where each member
// is the ssh session of one host's agent). Plain values.

#include <optional>
#include <string>
#include <vector>

#include "dlrun/launcher/prefix_template.hpp"
#include "dlrun/launcher/rank_env.hpp"

namespace dlrun::launcher {

struct ProgramSpec {
  std::string path;               // resolved, see resolve_program()
  std::vector<std::string> argv;  // argv[0] as the user wrote it
  std::string working_dir;
};

struct Member {
  RankSpec spec;         // spec.rank orders the members; spec.env is the process's environment
  ProgramSpec program;
  std::string name;      // in messages: "rank 3", "host b (node 1)"
  std::string log_path;  // where its output is kept; empty: not kept
  RankLabel label;       // for the --prefix template
  std::optional<std::string> stdin_text;  // see SpawnRequest::stdin_text
  int stdin_from = -1;                    // see SpawnRequest::stdin_from
};

}  // namespace dlrun::launcher
