#pragma once
// Time stamps as dlrun prints and stores them, through fmt's chrono formatting (one place,
// not a strftime per caller). Thread-safe.

#include <ctime>
#include <string>

namespace dlrun::launcher {

// "2026-11-23T12:00:00Z" (ISO 8601, UTC): job.json, `dlrun status`.
std::string utc_iso8601(std::time_t time);
// "2026-11-23T12:00:00" in local time, as squeue shows times: `dlrun status`'s table.
std::string local_iso8601(std::time_t time);
// "20261123-120000" in local time: the start of a job id.
std::string local_compact_stamp(std::time_t time);

}  // namespace dlrun::launcher
