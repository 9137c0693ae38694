#pragma once
// Inside the job store (job_store.cpp, job_store_schedule.cpp): a prepared SQLite statement
// and the GPU-list column's format. Not part of the launcher's interface.

#include <sqlite3.h>

#include <cstdint>
#include <string>
#include <vector>

#include <fmt/format.h>

#include "dlrun/error.hpp"
#include "dlrun/launcher/job_store.hpp"
#include "dlrun/launcher/text.hpp"

namespace dlrun::launcher {

// A prepared statement; binds by position, steps, finalises on destruction.
class JobStore::Statement {
 public:
  Statement(sqlite3* db, const std::string& sql) : m_db(db) {
    if (int rc = sqlite3_prepare_v2(db, sql.c_str(), -1, &m_stmt, nullptr); rc != SQLITE_OK) {
      throw_store_error(db, rc, fmt::format("job store (in: {})", sql));
    }
  }
  ~Statement() { sqlite3_finalize(m_stmt); }
  Statement& bind(int i, int64_t v) { check(sqlite3_bind_int64(m_stmt, i, v)); return *this; }
  Statement& bind(int i, int v) { return bind(i, static_cast<int64_t>(v)); }
  Statement& bind(int i, double v) { check(sqlite3_bind_double(m_stmt, i, v)); return *this; }
  Statement& bind(int i, const std::string& v) {
    check(sqlite3_bind_text(m_stmt, i, v.data(), static_cast<int>(v.size()), SQLITE_TRANSIENT));
    return *this;
  }
  Statement& bind_blob(int i, const std::string& v) {
    check(sqlite3_bind_blob(m_stmt, i, v.data(), static_cast<int>(v.size()), SQLITE_TRANSIENT));
    return *this;
  }
  Statement& bind_null(int i) { check(sqlite3_bind_null(m_stmt, i)); return *this; }
  // True while there is a row.
  bool step() {
    int rc = sqlite3_step(m_stmt);
    if (rc == SQLITE_ROW) return true;
    if (rc == SQLITE_DONE) return false;
    throw_store_error(m_db, rc, "job store");
  }
  int64_t int64(int col) { return sqlite3_column_int64(m_stmt, col); }
  double real(int col) { return sqlite3_column_double(m_stmt, col); }
  bool is_null(int col) { return sqlite3_column_type(m_stmt, col) == SQLITE_NULL; }
  std::string text(int col) {
    auto p = reinterpret_cast<const char*>(sqlite3_column_blob(m_stmt, col));
    return p ? std::string(p, static_cast<size_t>(sqlite3_column_bytes(m_stmt, col))) : std::string();
  }

 private:
  void check(int rc) {
    if (rc != SQLITE_OK) throw_store_error(m_db, rc, "job store");
  }
  sqlite3* m_db;
  sqlite3_stmt* m_stmt = nullptr;
};


// Every column of a job, in the order JobStore::read_row() reads them.
inline constexpr const char* k_job_columns =
    "id, name, state, spec_text, spec_path, base_dir, environment, uses_gpus, min_ranks, max_ranks, "
    "gpu_request, ranks, gpu_ids, submitted_at, started_at, ended_at, exit_code, reason, restarts, "
    "run_dir, supervisor_pid, supervisor_start, remote, slurm, slurm_id, owner_uid, policy, pinned, resized_at, resizes, failed_rank, final_batch, "
    "final_samples_per_sec, final_goodput, final_noise_scale, origin, requested_restarts, result";

// The same for a listing: the job file's text, its directory and the environment (kilobytes a
// job) are left empty, in their places, so read_row() reads both.
const std::string& job_list_columns();

// "0,3,5" <-> {"0","3","5"}: the gpu_ids and gpu_request columns.
inline std::string join(const std::vector<std::string>& ids) {
  std::string out;
  for (const auto& id : ids) out += (out.empty() ? "" : ",") + id;
  return out;
}

inline std::vector<std::string> split_ids(const std::string& text) {
  if (text.empty()) return {};
  return split(text, ',');
}


}  // namespace dlrun::launcher
