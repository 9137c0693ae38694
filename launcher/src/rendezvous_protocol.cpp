// The rendezvous's lines (docs/channels.md): JOIN from an agent, ASSIGN back to it.

#include <sstream>

#include <fmt/format.h>

#include "dlrun/launcher/rendezvous.hpp"

namespace dlrun::launcher {

std::string format_join(const JoinRequest& j) {
  return fmt::format("JOIN {} {} {} {} {}\n", j.secret, j.round, j.node, j.address, j.port);
}

std::optional<JoinRequest> parse_join(const std::string& line) {
  std::istringstream in(line);
  std::string word;
  JoinRequest j;
  if (!(in >> word) || word != "JOIN") return std::nullopt;
  if (!(in >> j.secret >> j.round >> j.node >> j.address >> j.port)) return std::nullopt;
  if (in >> word) return std::nullopt;
  return j;
}

std::string format_assignment(const Assignment& a) {
  // The plan is JSON without newlines; it takes the rest of the line.
  return fmt::format("ASSIGN {} {} {} {} {} {}{}{}\n", a.node_rank, a.first_rank, a.world_size, a.num_nodes,
                     a.master_addr, a.master_port, a.plan.empty() ? "" : " ", a.plan);
}

std::optional<Assignment> parse_assignment(const std::string& line) {
  std::istringstream in(line);
  std::string word;
  Assignment a;
  if (!(in >> word) || word != "ASSIGN") return std::nullopt;
  if (!(in >> a.node_rank >> a.first_rank >> a.world_size >> a.num_nodes >> a.master_addr >> a.master_port)) {
    return std::nullopt;
  }
  std::getline(in >> std::ws, a.plan);
  return a;
}

}  // namespace dlrun::launcher
