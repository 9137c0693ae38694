#pragma once
// The `--prefix` template put before each line a rank prints, e.g. "[{rank}] " or
// "{host}:{local_rank}| ". Placeholders: {rank} {local_rank} {node_rank} {host}
// {world_size}; "{{" and "}}" are literal braces. Parsed once, rendered once per rank.
// Pure, thread-safe after construction.

#include <string>
#include <string_view>
#include <vector>

namespace dlrun::launcher {

struct RankLabel {
  int rank = 0;
  int local_rank = 0;
  int node_rank = 0;
  int world_size = 1;
  std::string host;
};

class PrefixTemplate {
 public:
  // Throws ConfigError naming an unknown placeholder or an unclosed brace.
  explicit PrefixTemplate(std::string_view text);
  std::string render(const RankLabel& label) const;

  static constexpr const char* k_default = "[{rank}] ";

 private:
  enum class Field { literal, rank, local_rank, node_rank, host, world_size };
  struct Piece {
    Field field;
    std::string text;
  };
  std::vector<Piece> m_pieces;
};

// ANSI colour for a rank's prefix on a terminal: cycles through six readable colours.
std::string colorize_prefix(std::string_view prefix, int rank);

}  // namespace dlrun::launcher
