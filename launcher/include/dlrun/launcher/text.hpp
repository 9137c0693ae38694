#pragma once
// Small string helpers shared by the parsers: splitting, trimming, strict integer parsing
// and "did you mean" suggestions. Pure, thread-safe.

#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

namespace dlrun::launcher {

std::vector<std::string> split(std::string_view text, char separator);
std::string_view trim(std::string_view text);

// The whole text as a base-10 int, or nullopt (no sign tricks, no trailing junk).
std::optional<int> parse_int(std::string_view text);

// Parses "0,3" or "0-3,7" into a sorted list without duplicates. Throws ConfigError
// mentioning `what` (e.g. "--ranks") on bad input.
std::vector<int> parse_int_list(std::string_view text, std::string_view what);

// The most ranks a count may ask for (--nproc, --gpus, job.toml's nproc and gpus): a larger
// one, a typo, made dlrun work for minutes before any rank started.
inline constexpr int k_max_rank_count = 100000;

// "4" → {4, 4}; "2:4" → {2, 4} (an elastic count). Throws ConfigError mentioning `what`
// unless 1 <= MIN <= MAX <= k_max_rank_count.
std::pair<int, int> parse_count_range(std::string_view text, std::string_view what);

// The candidate closest to `word` by edit distance, if it is close enough to be a typo.
std::optional<std::string> closest_match(std::string_view word,
                                         const std::vector<std::string>& candidates);

// "1 GPU", "2 GPUs": a count and its noun, in the plural unless it is 1 (nouns with an -s plural).
std::string counted(long long n, std::string_view noun);

// "rank 1", "rank 1 and rank 2", "rank 1, rank 2 and rank 3": items as a sentence lists them.
std::string listed(const std::vector<std::string>& items);

// Valid UTF-8 without control characters: what is not becomes U+FFFD, so that neither a
// terminal nor an XML parser sees it (names and commands may hold anything).
std::string clean_text(std::string_view text);
// clean_text(), escaped for XML text and attribute values (SVG pictures).
std::string xml_text(std::string_view text);

}  // namespace dlrun::launcher
