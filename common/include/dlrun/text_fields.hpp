#pragma once
// Numbers and fields of dlrun's small text formats (checkpoint state, MANIFEST, the noise
// scale's and throughput profile's state), without iostreams: std::to_chars and
// std::from_chars know no locale, and they keep the runtime clear of the iostream and locale
// code that a second copy of libstdc++'s templates (a pip torch's libtorch exports some)
// crashed in a Python process (docs/runtime.md, "GPUs").

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

namespace dlrun::text {

// Shortest exact form of a double ("%.17g" digits at most: every double reads back exactly).
std::string number(double value);

// The whitespace-separated fields of a line.
std::vector<std::string_view> fields(std::string_view line);

// The lines of a text, without their '\n' (a last line without one included).
std::vector<std::string_view> lines(std::string_view text);

// Whole-field parses: false when the field is not entirely one number (or out of range).
bool parse(std::string_view field, double& value);
bool parse(std::string_view field, int64_t& value);
bool parse(std::string_view field, uint64_t& value);
bool parse(std::string_view field, int& value);

}  // namespace dlrun::text
