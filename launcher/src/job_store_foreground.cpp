// The job store's side of runs in the foreground (`dlrun local`, `dlrun run`): they are jobs
// like submitted ones, recorded from their start (job_store.hpp, foreground_job.hpp), and the
// look-ups that `--resume` and retention need.

#include <unistd.h>

#include <algorithm>

#include "dlrun/launcher/job_store.hpp"
#include "job_store_statement.hpp"

namespace dlrun::launcher {

int64_t JobStore::record_foreground(const NewJob& job, const ProcessIdentity& supervisor) {
  const double now = now_seconds();
  Statement insert(
      m_db,
      "INSERT INTO jobs (name, state, spec_text, spec_path, base_dir, environment, uses_gpus, "
      "min_ranks, max_ranks, gpu_request, submitted_at, started_at, remote, owner_uid, "
      "supervisor_pid, supervisor_start, origin) VALUES "
      "(?,'RUNNING',?,'',?,x'',?,?,?,?,?,?,?,?,?,?,?)");
  insert.bind(1, job.name)
      .bind(2, job.spec_text)
      .bind(3, job.base_dir)
      .bind(4, job.request.uses_gpus ? 1 : 0)
      .bind(5, job.request.min_ranks)
      .bind(6, job.request.max_ranks)
      .bind(7, join(job.request.gpu_ids))
      .bind(8, now)
      .bind(9, now)
      .bind(10, job.request.remote ? 1 : 0)
      .bind(11, static_cast<int64_t>(job.owner_uid))
      .bind(12, static_cast<int64_t>(supervisor.pid))
      .bind(13, static_cast<int64_t>(supervisor.start_time))
      .bind(14, to_string(job.origin));
  insert.step();
  return sqlite3_last_insert_rowid(m_db);
}

void JobStore::set_foreground_start(int64_t id, const Allocation& allocation,
                                    const std::string& run_dir, int min_ranks, int max_ranks) {
  begin_immediate();
  try {
    start_locked(id, allocation, run_dir);
    Statement bounds(m_db, "UPDATE jobs SET min_ranks = ?, max_ranks = ? WHERE id = ?");
    bounds.bind(1, min_ranks).bind(2, max_ranks).bind(3, id);
    bounds.step();
    commit();
  } catch (...) {
    rollback();
    throw;
  }
}

bool JobStore::reopen(int64_t id, const ProcessIdentity& supervisor, const std::string& spec_text) {
  Statement s(
      m_db,
      "UPDATE jobs SET state = 'RUNNING', supervisor_pid = ?, supervisor_start = ?, spec_text = ?, "
      "started_at = ?, ended_at = 0, exit_code = NULL, reason = '', failed_rank = NULL, "
      "final_batch = NULL, "
      "final_samples_per_sec = NULL, final_goodput = NULL, final_noise_scale = NULL "
      "WHERE id = ? AND state IN ('SUCCEEDED','FAILED','CANCELLED')");
  s.bind(1, static_cast<int64_t>(supervisor.pid))
      .bind(2, static_cast<int64_t>(supervisor.start_time))
      .bind(3, spec_text)
      .bind(4, now_seconds())
      .bind(5, id);
  s.step();
  return sqlite3_changes(m_db) > 0;
}

std::vector<std::string> JobStore::gpus_held(const std::vector<int64_t>& except) {
  std::vector<std::string> gpus;
  Statement s(m_db,
              "SELECT id, gpu_ids FROM jobs WHERE state IN ('RUNNING','RESCALING') AND remote = 0 "
              "AND uses_gpus = 1");
  while (s.step()) {
    if (std::find(except.begin(), except.end(), s.int64(0)) != except.end()) continue;
    for (auto& id : split_ids(s.text(1))) {
      if (std::find(gpus.begin(), gpus.end(), id) == gpus.end()) gpus.push_back(id);
    }
  }
  return gpus;
}

void JobStore::forget(int64_t id) {
  begin_immediate();
  try {
    Statement events(m_db, "DELETE FROM allocations WHERE job = ?");
    events.bind(1, id);
    events.step();
    Statement job(m_db, "DELETE FROM jobs WHERE id = ?");
    job.bind(1, id);
    job.step();
    // Its number goes to the next job, unless a later one took a number meanwhile.
    Statement number(m_db,
                     "UPDATE sqlite_sequence SET seq = seq - 1 WHERE name = 'jobs' AND seq = ?");
    number.bind(1, id);
    number.step();
    commit();
  } catch (...) {
    rollback();
    throw;
  }
}

std::optional<JobRecord> JobStore::find_by_name(const std::string& name, NamedJob which) {
  // active_first: this user's jobs before others' (in a shared store another user's job of
  // the name, perhaps one whose end nobody recorded, is not the one meant), then those that
  // have not ended.
  Statement s(m_db, fmt::format("SELECT {} FROM jobs WHERE name = ? ORDER BY {}id DESC LIMIT 1", k_job_columns,
                                which == NamedJob::active_first
                                    ? fmt::format("owner_uid NOT IN ({}, -1), state IN ('SUCCEEDED','FAILED','CANCELLED'), ",
                                                  static_cast<long long>(::geteuid()))
                                    : std::string()));
  s.bind(1, name);
  if (!s.step()) return std::nullopt;
  return read_row(s);
}

std::optional<int64_t> JobStore::newest_of_mine() {
  Statement s(m_db, fmt::format("SELECT id FROM jobs WHERE owner_uid IN ({}, -1) ORDER BY id DESC LIMIT 1",
                                static_cast<long long>(::geteuid())));
  if (!s.step()) return std::nullopt;
  return s.int64(0);
}

std::vector<JobRecord> JobStore::ended_before(double before, int keep) {
  Statement s(
      m_db,
      fmt::format(
          "SELECT {} FROM jobs WHERE state IN ('SUCCEEDED','FAILED','CANCELLED') AND slurm = 0 "
          "ORDER BY ended_at DESC, id DESC LIMIT -1 OFFSET ?",
          job_list_columns()));
  s.bind(1, std::max(0, keep));
  std::vector<JobRecord> jobs;
  while (s.step()) {
    JobRecord job = read_row(s);
    if (job.ended_at < before) jobs.push_back(std::move(job));
  }
  return jobs;
}

}  // namespace dlrun::launcher
