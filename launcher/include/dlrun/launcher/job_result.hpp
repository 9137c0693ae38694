#pragma once
// What a job says it achieved: a JSON object its program writes to DLRUN_RESULT_FILE
// (RUN_DIR/result.json), e.g. {"test_accuracy": 0.8807, "epochs": 3}. dlrun keeps it with the
// job's record when the job ends (dlrun clean and retention then remove nothing of it) and
// shows it in dlrun status (`result` in --json): a sweep's runs are compared without parsing
// their logs. Pure reading; no store.

#include <optional>
#include <string>

namespace dlrun::launcher {

inline constexpr const char* k_result_file_name = "result.json";
inline constexpr size_t k_max_result_bytes = 64 * 1024;

// RUN_DIR/result.json as compact JSON, when it is a regular file holding one JSON object of at
// most 64 KiB, nested at most 32 deep; nullopt
// otherwise (none written, half-written, not an object: nothing is shown rather than a guess).
std::optional<std::string> read_job_result(const std::string& run_dir);

}  // namespace dlrun::launcher
