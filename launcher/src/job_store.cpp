#include "dlrun/launcher/job_store.hpp"

#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cctype>
#include <cstring>
#include <filesystem>
#include <utility>
#include <thread>

#include <fmt/format.h>

#include "dlrun/error.hpp"
#include "dlrun/launcher/text.hpp"
#include "dlrun/log.hpp"
#include "dlrun/protocol.hpp"
#include "job_store_statement.hpp"

namespace dlrun::launcher {
namespace {

constexpr const char* k_schema = R"sql(
CREATE TABLE IF NOT EXISTS jobs (
  id               INTEGER PRIMARY KEY AUTOINCREMENT,
  name             TEXT NOT NULL,
  state            TEXT NOT NULL,
  spec_text        TEXT NOT NULL,
  spec_path        TEXT NOT NULL,
  base_dir         TEXT NOT NULL,
  environment      BLOB NOT NULL,
  uses_gpus        INTEGER NOT NULL,
  remote           INTEGER NOT NULL DEFAULT 0,
  slurm            INTEGER NOT NULL DEFAULT 0,
  slurm_id         INTEGER NOT NULL DEFAULT 0,
  min_ranks        INTEGER NOT NULL,
  max_ranks        INTEGER NOT NULL,
  gpu_request      TEXT NOT NULL DEFAULT '',
  ranks            INTEGER NOT NULL DEFAULT 0,
  gpu_ids          TEXT NOT NULL DEFAULT '',
  submitted_at     REAL NOT NULL,
  started_at       REAL NOT NULL DEFAULT 0,
  ended_at         REAL NOT NULL DEFAULT 0,
  exit_code        INTEGER,
  reason           TEXT NOT NULL DEFAULT '',
  restarts         INTEGER NOT NULL DEFAULT 0,
  run_dir          TEXT NOT NULL DEFAULT '',
  supervisor_pid   INTEGER NOT NULL DEFAULT 0,
  supervisor_start INTEGER NOT NULL DEFAULT 0,
  owner_uid        INTEGER NOT NULL DEFAULT -1,
  policy           TEXT NOT NULL DEFAULT 'fifo',
  pinned           INTEGER NOT NULL DEFAULT 0,
  resized_at       REAL NOT NULL DEFAULT 0,
  resizes          INTEGER NOT NULL DEFAULT 0,
  failed_rank      INTEGER,
  final_batch      REAL,
  final_samples_per_sec REAL,
  final_goodput    REAL,
  final_noise_scale REAL,
  origin           TEXT NOT NULL DEFAULT 'submit',
  requested_restarts INTEGER NOT NULL DEFAULT 0,
  result           TEXT
);
CREATE INDEX IF NOT EXISTS jobs_by_state ON jobs(state, id);
CREATE INDEX IF NOT EXISTS jobs_by_end ON jobs(ended_at, id);
CREATE TABLE IF NOT EXISTS allocations (
  seq              INTEGER PRIMARY KEY AUTOINCREMENT,
  job              INTEGER NOT NULL,
  at               REAL NOT NULL,
  ranks            INTEGER NOT NULL,
  gpu_ids          TEXT NOT NULL,
  cause            TEXT NOT NULL
);
CREATE TABLE IF NOT EXISTS scheduler_lease (
  one              INTEGER PRIMARY KEY CHECK (one = 1),
  pid              INTEGER NOT NULL,
  start            INTEGER NOT NULL,
  since            REAL NOT NULL
);
)sql";

// The schema's version, kept in the store's user_version: raise it with every change below.
constexpr int k_schema_version = 4;  // 2: jobs_by_end; 3: requested_restarts; 4: result

// Columns later versions added, with what rows from before them hold.
constexpr std::pair<const char*, const char*> k_added_columns[] = {
    {"owner_uid", "INTEGER NOT NULL DEFAULT -1"},  // unknown owner
    {"policy", "TEXT NOT NULL DEFAULT 'fifo'"},    // queued in order, as then
    {"pinned", "INTEGER NOT NULL DEFAULT 0"},
    {"resized_at", "REAL NOT NULL DEFAULT 0"},
    // Before these, `restarts` counted resizes too; the metrics a job ended with were not kept.
    {"resizes", "INTEGER NOT NULL DEFAULT 0"},
    {"failed_rank", "INTEGER"},
    {"final_batch", "REAL"},
    {"final_samples_per_sec", "REAL"},
    {"final_goodput", "REAL"},
    {"final_noise_scale", "REAL"},
    // Before it, only submitted jobs were recorded.
    {"origin", "TEXT NOT NULL DEFAULT 'submit'"},
    // Before it, restarts the ranks asked for (exit 75) were not counted.
    {"requested_restarts", "INTEGER NOT NULL DEFAULT 0"},
    // Before it, what a job said it achieved (DLRUN_RESULT_FILE) was not kept.
    {"result", "TEXT"},
};

// The highest job number among the run directories beside the store ($DLRUN_HOME/runs/N,
// $DLRUN_HOME/jobs/N): a store made anew where an older one was removed numbers its jobs after
// them, so that no job takes (and resumes from) another's directory.
int64_t highest_numbered_run(const std::string& store_path) {
  namespace fs = std::filesystem;
  int64_t highest = 0;
  const fs::path home = fs::path(store_path).parent_path();
  for (const char* sub : {"runs", "jobs"}) {
    std::error_code ec;
    for (auto it = fs::directory_iterator(home / sub, ec); !ec && it != fs::directory_iterator(); it.increment(ec)) {
      const std::string name = it->path().filename().string();
      if (name.empty() || name.size() > 15 || !std::all_of(name.begin(), name.end(), ::isdigit)) continue;
      highest = std::max<int64_t>(highest, std::stoll(name));
    }
  }
  return highest;
}

}  // namespace

const std::string& job_list_columns() {
  static const std::string columns = [] {
    std::string c = k_job_columns;
    for (auto [column, empty] : {std::pair{"spec_text,", "'',"}, {"base_dir,", "'',"}, {"environment,", "x'',"}}) {
      c.replace(c.find(column), std::strlen(column), empty);
    }
    return c;
  }();
  return columns;
}

double now_seconds() {
  using namespace std::chrono;
  return duration<double>(system_clock::now().time_since_epoch()).count();
}

std::string to_string(JobState state) {
  switch (state) {
    case JobState::pending: return "PENDING";
    case JobState::running: return "RUNNING";
    case JobState::rescaling: return "RESCALING";
    case JobState::succeeded: return "SUCCEEDED";
    case JobState::failed: return "FAILED";
    case JobState::cancelled: return "CANCELLED";
  }
  return "UNKNOWN";
}

std::optional<JobState> parse_job_state(const std::string& text) {
  for (auto s : {JobState::pending, JobState::running, JobState::rescaling, JobState::succeeded,
                 JobState::failed, JobState::cancelled}) {
    if (to_string(s) == text) return s;
  }
  return std::nullopt;
}

std::string to_string(JobOrigin origin) {
  switch (origin) {
    case JobOrigin::submit: return "submit";
    case JobOrigin::local: return "local";
    case JobOrigin::run: return "run";
  }
  return "submit";
}

JobOrigin parse_job_origin(const std::string& text) {
  if (text == "local") return JobOrigin::local;
  if (text == "run") return JobOrigin::run;
  return JobOrigin::submit;
}

JobState state_after(int exit_code, bool stopped_by_signal) {
  if (exit_code == 0) return JobState::succeeded;
  return stopped_by_signal ? JobState::cancelled : JobState::failed;
}

bool is_terminal(JobState state) {
  return state == JobState::succeeded || state == JobState::failed || state == JobState::cancelled;
}

int64_t queue_head(const std::vector<JobRecord>& jobs, bool uses_gpus) {
  int64_t head = -1;
  for (const auto& job : jobs) {
    const auto& request = job.submitted.request;
    if (job.state == JobState::pending && !request.remote && !request.goodput && request.uses_gpus == uses_gpus &&
        (head < 0 || job.id < head))
      head = job.id;
  }
  return head;
}

JobStore::JobStore(const std::string& path) : m_path(path) {
  if (sqlite3_open_v2(path.c_str(), &m_db, SQLITE_OPEN_READWRITE | SQLITE_OPEN_CREATE | SQLITE_OPEN_NOMUTEX,
                      nullptr) != SQLITE_OK) {
    std::string message = m_db ? sqlite3_errmsg(m_db) : "out of memory";
    sqlite3_close(m_db);
    m_db = nullptr;
    throw Error(fmt::format("cannot open the job store {}: {} (check DLRUN_HOME)", path, message));
  }
  sqlite3_busy_timeout(m_db, 30000);
  // The last connection to close would checkpoint the WAL into the database, with several
  // fsyncs: milliseconds at the end of every dlrun command. SQLite's automatic checkpoint
  // (every 1000 pages of WAL) does it instead, and the next open reads the WAL as it is.
  sqlite3_db_config(m_db, SQLITE_DBCONFIG_NO_CKPT_ON_CLOSE, 1, nullptr);
  // Many dlrun processes may open a new store at once (50 concurrent submits): switching it
  // to WAL and creating the schema can then answer SQLITE_BUSY at once, without waiting in
  // the busy handler. Such an answer is retried, with backoff, for as long as the busy
  // timeout would have waited.
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(30);
  auto pause = std::chrono::milliseconds(5);
  std::string error;
  int rc;
  while ((rc = open_schema(error)) == SQLITE_BUSY || rc == SQLITE_LOCKED) {
    if (std::chrono::steady_clock::now() > deadline) break;
    std::this_thread::sleep_for(pause);
    pause = std::min(pause * 2, std::chrono::milliseconds(200));
  }
  if (rc != SQLITE_OK) {
    sqlite3_close(m_db);
    m_db = nullptr;
    throw Error(fmt::format("job store {}: {}", m_path, error));
  }
}

int JobStore::open_schema(std::string& error) {
  auto run = [&](const char* sql) {
    char* message = nullptr;
    int rc = sqlite3_exec(m_db, sql, nullptr, nullptr, &message);
    if (rc != SQLITE_OK) error = message ? message : sqlite3_errstr(rc);
    sqlite3_free(message);
    return rc & 0xff;
  };
  // WAL: readers never block the writer; NORMAL sync is crash-safe for the database
  // (a power cut may lose the last transaction, never corrupt the file).
  if (int rc = run("PRAGMA synchronous=NORMAL"); rc != SQLITE_OK) return rc;
  // A store this version made or brought up to date says so in its user_version: nothing to
  // check, and it is in WAL mode already, which the file keeps (every dlrun command opens the
  // store; `dlrun local` must start in milliseconds).
  // A later version's store is its own to bring up to date: an earlier dlrun that opens it
  // (a supervisor still running after an upgrade) leaves it as it is.
  if (schema_version() >= k_schema_version) return SQLITE_OK;
  for (const char* sql : {"PRAGMA journal_mode=WAL", "BEGIN IMMEDIATE"}) {
    if (int rc = run(sql); rc != SQLITE_OK) return rc;
  }
  const bool fresh = schema_version() == 0 && !has_jobs_table();
  int rc = run(k_schema);
  if (rc == SQLITE_OK && fresh) {
    if (const int64_t highest = highest_numbered_run(m_path); highest > 0) {
      rc = run(fmt::format("INSERT INTO sqlite_sequence (name, seq) VALUES ('jobs', {})", highest).c_str());
    }
  }
  // A store made by an earlier version: its missing columns are added.
  for (const auto& [column, type] : k_added_columns) {
    if (rc != SQLITE_OK) break;
    sqlite3_stmt* has = nullptr;
    rc = sqlite3_prepare_v2(m_db, "SELECT count(*) FROM pragma_table_info('jobs') WHERE name = ?", -1, &has,
                            nullptr) & 0xff;
    if (rc == SQLITE_OK) sqlite3_bind_text(has, 1, column, -1, SQLITE_STATIC);
    bool missing = rc == SQLITE_OK && sqlite3_step(has) == SQLITE_ROW && sqlite3_column_int(has, 0) == 0;
    sqlite3_finalize(has);
    if (missing) rc = run(fmt::format("ALTER TABLE jobs ADD COLUMN {} {}", column, type).c_str());
  }
  if (rc == SQLITE_OK) rc = run(fmt::format("PRAGMA user_version = {}", k_schema_version).c_str());
  if (rc == SQLITE_OK) rc = run("COMMIT");
  if (rc != SQLITE_OK) rollback();
  return rc;
}

bool JobStore::has_jobs_table() {
  sqlite3_stmt* statement = nullptr;
  bool found = false;
  if (sqlite3_prepare_v2(m_db, "SELECT 1 FROM sqlite_master WHERE type = 'table' AND name = 'jobs'", -1, &statement,
                         nullptr) == SQLITE_OK) {
    found = sqlite3_step(statement) == SQLITE_ROW;
  }
  sqlite3_finalize(statement);
  return found;
}

int JobStore::schema_version() {
  sqlite3_stmt* statement = nullptr;
  int version = -1;
  if (sqlite3_prepare_v2(m_db, "PRAGMA user_version", -1, &statement, nullptr) == SQLITE_OK &&
      sqlite3_step(statement) == SQLITE_ROW) {
    version = sqlite3_column_int(statement, 0);
  }
  sqlite3_finalize(statement);
  return version;
}

JobStore::~JobStore() { sqlite3_close(m_db); }

void JobStore::exec(const char* sql) {
  char* error = nullptr;
  int rc = sqlite3_exec(m_db, sql, nullptr, nullptr, &error);
  if (rc != SQLITE_OK) {
    sqlite3_free(error);
    throw_store_error(m_db, rc, fmt::format("job store {}", m_path));
  }
}

void write_when_store_takes_it(const std::string& what, const std::function<void()>& write, double every_seconds,
                               double for_seconds) {
  const auto until = std::chrono::steady_clock::now() + std::chrono::duration_cast<std::chrono::steady_clock::duration>(
                                                             std::chrono::duration<double>(for_seconds));
  bool said = false;
  for (;;) {
    try {
      write();
      if (said) log::info("{}: recorded", what);
      return;
    } catch (const StoreUnavailable& e) {
      if (std::chrono::steady_clock::now() >= until) throw;
      if (!said) {
        log::warn("{}: cannot be recorded now ({}); trying again every {:g} s", what, e.what(), every_seconds);
        said = true;
      }
      std::this_thread::sleep_for(std::chrono::duration<double>(every_seconds));
    }
  }
}

void throw_store_error(sqlite3* db, int rc, const std::string& where) {
  const std::string message = db && sqlite3_errcode(db) == rc ? sqlite3_errmsg(db) : sqlite3_errstr(rc);
  switch (rc & 0xff) {
    case SQLITE_BUSY:
    case SQLITE_LOCKED:
      throw StoreUnavailable(fmt::format("{}: {}: another process has held it for more than 30 s (a dlrun stopped "
                                         "with Ctrl-Z, an open sqlite3 shell); try again once it lets go",
                                         where, message));
    case SQLITE_FULL:
      throw StoreUnavailable(fmt::format("{}: {}: free some space on its file system (DLRUN_HOME), then try again",
                                         where, message));
    case SQLITE_IOERR:
      throw StoreUnavailable(fmt::format("{}: {}", where, message));
    default:
      throw Error(fmt::format("{}: {}", where, message));
  }
}

void JobStore::begin_immediate() { exec("BEGIN IMMEDIATE"); }
void JobStore::commit() { exec("COMMIT"); }
void JobStore::rollback() { sqlite3_exec(m_db, "ROLLBACK", nullptr, nullptr, nullptr); }

int64_t JobStore::submit(const NewJob& job, const ProcessIdentity& supervisor) {
  Statement insert(m_db,
                   "INSERT INTO jobs (name, state, spec_text, spec_path, base_dir, environment, uses_gpus, "
                   "min_ranks, max_ranks, gpu_request, submitted_at, remote, slurm, owner_uid, supervisor_pid, "
                   "supervisor_start, policy) VALUES (?,?,?,?,?,?,?,?,?,?,?,?,?,?,?,?,?)");
  insert.bind(1, job.name).bind(2, to_string(JobState::pending)).bind(3, job.spec_text).bind(4, job.spec_path)
      .bind(5, job.base_dir).bind_blob(6, job.environment).bind(7, job.request.uses_gpus ? 1 : 0)
      .bind(8, job.request.min_ranks).bind(9, job.request.max_ranks).bind(10, join(job.request.gpu_ids))
      .bind(11, now_seconds()).bind(12, job.request.remote ? 1 : 0).bind(13, job.slurm ? 1 : 0)
      .bind(14, static_cast<int64_t>(job.owner_uid)).bind(15, static_cast<int64_t>(supervisor.pid))
      .bind(16, static_cast<int64_t>(supervisor.start_time))
      .bind(17, std::string(job.request.goodput ? "goodput" : "fifo"));
  insert.step();
  return sqlite3_last_insert_rowid(m_db);
}

JobRecord JobStore::read_row(Statement& s) {
  JobRecord r;
  r.id = s.int64(0);
  r.name = s.text(1);
  r.state = parse_job_state(s.text(2)).value_or(JobState::failed);
  r.submitted.name = r.name;
  r.submitted.spec_text = s.text(3);
  r.submitted.spec_path = s.text(4);
  r.submitted.base_dir = s.text(5);
  r.submitted.environment = s.text(6);
  r.submitted.request.uses_gpus = s.int64(7) != 0;
  r.submitted.request.min_ranks = static_cast<int>(s.int64(8));
  r.submitted.request.max_ranks = static_cast<int>(s.int64(9));
  r.submitted.request.gpu_ids = split_ids(s.text(10));
  r.allocation.ranks = static_cast<int>(s.int64(11));
  r.allocation.gpu_ids = split_ids(s.text(12));
  r.submitted_at = s.real(13);
  r.started_at = s.real(14);
  r.ended_at = s.real(15);
  if (!s.is_null(16)) r.exit_code = static_cast<int>(s.int64(16));
  r.reason = s.text(17);
  r.restarts = static_cast<int>(s.int64(18));
  r.run_dir = s.text(19);
  r.supervisor = {static_cast<pid_t>(s.int64(20)), static_cast<uint64_t>(s.int64(21))};
  r.submitted.request.remote = s.int64(22) != 0;
  r.submitted.slurm = s.int64(23) != 0;
  r.slurm_id = s.int64(24);
  r.submitted.owner_uid = static_cast<int>(s.int64(25));
  r.submitted.request.goodput = s.text(26) == "goodput";
  r.pinned = static_cast<int>(s.int64(27));
  r.resized_at = s.real(28);
  r.resizes = static_cast<int>(s.int64(29));
  if (!s.is_null(30)) r.failed_rank = static_cast<int>(s.int64(30));
  auto number = [&s](int col) { return s.is_null(col) ? std::nullopt : std::optional<double>(s.real(col)); };
  r.final_metrics.global_batch = number(31);
  r.final_metrics.samples_per_sec = number(32);
  r.final_metrics.goodput = number(33);
  r.final_metrics.noise_scale = number(34);
  r.submitted.origin = parse_job_origin(s.text(35));
  r.requested_restarts = static_cast<int>(s.int64(36));
  if (!s.is_null(37)) r.result = s.text(37);
  return r;
}

std::optional<JobRecord> JobStore::get(int64_t id) {
  Statement s(m_db, fmt::format("SELECT {} FROM jobs WHERE id = ?", k_job_columns));
  s.bind(1, id);
  if (!s.step()) return std::nullopt;
  return read_row(s);
}

std::vector<JobRecord> JobStore::list(bool all, int recent) {
  std::vector<JobRecord> jobs;
  std::string sql =
      all ? fmt::format("SELECT {} FROM jobs ORDER BY id", job_list_columns())
          : fmt::format("SELECT * FROM (SELECT {0} FROM jobs WHERE state IN ('SUCCEEDED','FAILED','CANCELLED') "
                        "ORDER BY ended_at DESC, id DESC LIMIT {1}) UNION ALL SELECT {0} FROM jobs WHERE state IN "
                        "('PENDING','RUNNING','RESCALING') ORDER BY id",
                        job_list_columns(), recent);
  if (all) {
    Statement count(m_db, "SELECT count(*) FROM jobs");
    if (count.step()) jobs.reserve(static_cast<size_t>(count.int64(0)));
  }
  Statement s(m_db, sql);
  while (s.step()) jobs.push_back(read_row(s));
  return jobs;
}

bool JobStore::claim(int64_t id, const ProcessIdentity& me) {
  begin_immediate();
  try {
    auto job = get(id);
    bool ok = job && !is_terminal(job->state) &&
              (job->submitted.owner_uid < 0 || static_cast<uid_t>(job->submitted.owner_uid) == ::geteuid()) &&
              (job->supervisor.pid == 0 || !job->supervisor.alive() ||
               (job->supervisor.pid == me.pid && job->supervisor.start_time == me.start_time));
    if (ok) {
      Statement s(m_db, "UPDATE jobs SET supervisor_pid = ?, supervisor_start = ? WHERE id = ?");
      s.bind(1, static_cast<int64_t>(me.pid)).bind(2, static_cast<int64_t>(me.start_time)).bind(3, id);
      s.step();
    }
    commit();
    return ok;
  } catch (...) {
    rollback();
    throw;
  }
}

Usage JobStore::usage_locked() {
  Usage usage;
  // A run in the foreground (dlrun local) holds its GPUs, so that no queued job's ranks share them,
  // but no CPU slots: it never waited for them, and CPU ranks share cores as the kernel schedules.
  Statement s(m_db, "SELECT uses_gpus, ranks, gpu_ids FROM jobs WHERE state IN ('RUNNING','RESCALING') "
                    "AND remote = 0 AND (uses_gpus = 1 OR origin = 'submit')");
  while (s.step()) {
    if (s.int64(0)) {
      for (auto& id : split_ids(s.text(2))) usage.gpus_in_use.insert(id);
    } else {
      usage.cpu_slots_in_use += static_cast<int>(s.int64(1));
    }
  }
  return usage;
}

int64_t JobStore::changes_by_others() {
  Statement s(m_db, "PRAGMA data_version");
  return s.step() ? s.int64(0) : 0;
}

std::optional<Allocation> JobStore::try_start(int64_t id, const Capacity& capacity, const std::string& run_dir,
                                              double goodput_starving_before) {
  begin_immediate();
  try {
    // In order among the jobs that wait for this machine's resources: one whose ranks run
    // elsewhere (Slurm's queue, kind ssh) neither waits behind them nor holds them up.
    auto job = get(id);
    if (!job || job->state != JobState::pending) {
      commit();
      return std::nullopt;
    }
    // GPU jobs and CPU jobs wait in queues of their own: neither uses what the other waits for
    // (a CPU job waited behind a GPU job with every CPU slot free).
    Statement head(m_db, "SELECT id FROM jobs WHERE state = 'PENDING' AND remote = 0 AND policy != 'goodput' AND "
                         "uses_gpus = ? ORDER BY id LIMIT 1");
    head.bind(1, job->submitted.request.uses_gpus ? 1 : 0);
    if (!job->submitted.request.remote && (!head.step() || head.int64(0) != id)) {
      commit();
      return std::nullopt;
    }
    if (goodput_starving_before > 0 && job->submitted.request.uses_gpus && !job->submitted.request.remote) {
      Statement starving(m_db, "SELECT 1 FROM jobs WHERE state = 'PENDING' AND remote = 0 AND policy = 'goodput' AND "
                               "uses_gpus = 1 AND id < ? AND submitted_at < ? LIMIT 1");
      starving.bind(1, id).bind(2, goodput_starving_before);
      if (starving.step()) {
        commit();
        return std::nullopt;
      }
    }
    auto allocation = fit(job->submitted.request, capacity, usage_locked());
    if (allocation) {
      start_locked(id, *allocation, run_dir);
    }
    commit();
    return allocation;
  } catch (...) {
    rollback();
    throw;
  }
}

void JobStore::set_restarts(int64_t id, int restarts, int resizes, int requested) {
  Statement s(m_db, "UPDATE jobs SET restarts = ?, resizes = ?, requested_restarts = ? WHERE id = ?");
  s.bind(1, restarts).bind(2, resizes).bind(3, requested).bind(4, id);
  s.step();
}

void JobStore::bind_metrics(Statement& s, int first, const MetricsSnapshot& m) {
  int i = first;
  for (const auto& value : {m.global_batch, m.samples_per_sec, m.goodput, m.noise_scale}) {
    if (value) s.bind(i, *value); else s.bind_null(i);
    ++i;
  }
}

void JobStore::set_final_metrics(int64_t id, const MetricsSnapshot& metrics) {
  Statement s(m_db, "UPDATE jobs SET final_batch = ?, final_samples_per_sec = ?, final_goodput = ?, "
                    "final_noise_scale = ? WHERE id = ?");
  bind_metrics(s, 1, metrics);
  s.bind(5, id);
  s.step();
}

std::vector<std::pair<int64_t, std::string>> JobStore::environments_holding(const std::string& bytes) {
  Statement s(m_db, "SELECT id, environment FROM jobs WHERE instr(environment, ?) > 0");
  s.bind_blob(1, bytes);
  std::vector<std::pair<int64_t, std::string>> out;
  while (s.step()) out.emplace_back(s.int64(0), s.text(1));
  return out;
}

void JobStore::set_result(int64_t id, const std::string& json) {
  Statement s(m_db, "UPDATE jobs SET result = ? WHERE id = ?");
  s.bind(1, json).bind(2, id);
  s.step();
}

void JobStore::set_lost_end(int64_t id, double at) {
  Statement s(m_db, "UPDATE jobs SET ended_at = ? WHERE id = ? AND state = 'FAILED' AND ? > started_at AND ? < ended_at");
  s.bind(1, at).bind(2, id).bind(3, at).bind(4, at);
  s.step();
}

bool JobStore::set_slurm_id(int64_t id, int64_t slurm_id, const std::string& run_dir) {
  {
    Statement s(m_db, "UPDATE jobs SET slurm_id = ?, run_dir = ?, ranks = max_ranks WHERE id = ? AND state = 'PENDING'");
    s.bind(1, slurm_id).bind(2, run_dir).bind(3, id);
    s.step();
    if (sqlite3_changes(m_db) > 0) return true;
  }
  // Cancelled meanwhile: the id is still recorded, for dlrun status.
  Statement s(m_db, "UPDATE jobs SET slurm_id = ?, run_dir = ? WHERE id = ?");
  s.bind(1, slurm_id).bind(2, run_dir).bind(3, id);
  s.step();
  return false;
}

std::optional<Allocation> JobStore::resize_allocation(int64_t id, int world, const Capacity& capacity,
                                                     const std::string& cause) {
  begin_immediate();
  try {
    auto job = get(id);
    Usage usage = usage_locked();
    // What this job holds now is free for its own new allocation.
    if (job->submitted.request.uses_gpus) {
      for (const auto& gpu : job->allocation.gpu_ids) usage.gpus_in_use.erase(gpu);
    } else {
      usage.cpu_slots_in_use -= job->allocation.ranks;
    }
    ResourceRequest request = job->submitted.request;
    request.min_ranks = request.max_ranks = world;
    request.gpu_ids.clear();
    std::optional<Allocation> allocation;
    if (request.uses_gpus) {
      // Keep the GPUs it has (in order), then add free ones.
      Allocation a;
      for (const auto& gpu : job->allocation.gpu_ids) {
        if (static_cast<int>(a.gpu_ids.size()) < world) a.gpu_ids.push_back(gpu);
      }
      for (int i = 0; i < capacity.gpus && static_cast<int>(a.gpu_ids.size()) < world; ++i) {
        std::string gpu = std::to_string(i);
        if (!usage.gpus_in_use.count(gpu) && !capacity.gpus_elsewhere.count(gpu) &&
            std::find(a.gpu_ids.begin(), a.gpu_ids.end(), gpu) == a.gpu_ids.end()) {
          a.gpu_ids.push_back(gpu);
        }
      }
      a.ranks = static_cast<int>(a.gpu_ids.size());
      if (a.ranks == world) allocation = a;
    } else {
      allocation = fit(request, capacity, usage);
    }
    if (allocation) write_allocation_locked(id, *allocation, cause);
    commit();
    return allocation;
  } catch (...) {
    rollback();
    throw;
  }
}

void JobStore::set_allocation(int64_t id, const Allocation& allocation, const std::string& cause) {
  begin_immediate();
  try {
    // The supervisor and whoever asked for a resize both record its outcome: once is its record.
    const auto now = get(id);
    if (!now || now->allocation.ranks != allocation.ranks || now->allocation.gpu_ids != allocation.gpu_ids) {
      write_allocation_locked(id, allocation, cause);
    }
    commit();
  } catch (...) {
    rollback();
    throw;
  }
}

void JobStore::set_rescaling(int64_t id, bool rescaling) {
  Statement s(m_db, rescaling ? "UPDATE jobs SET state = 'RESCALING' WHERE id = ? AND state = 'RUNNING'"
                              : "UPDATE jobs SET state = 'RUNNING' WHERE id = ? AND state = 'RESCALING'");
  s.bind(1, id);
  s.step();
}

void JobStore::mark_running(int64_t id, std::optional<double> at) {
  Statement s(m_db,
              "UPDATE jobs SET state = 'RUNNING', started_at = ?, reason = '' WHERE id = ? AND state = 'PENDING'");
  const double now = now_seconds();
  s.bind(1, at && *at > 0 && *at <= now ? *at : now).bind(2, id);
  s.step();
}

void JobStore::note_pending_reason(int64_t id, const std::string& reason) {
  Statement s(m_db, "UPDATE jobs SET reason = ? WHERE id = ? AND state = 'PENDING'");
  s.bind(1, reason).bind(2, id);
  s.step();
}

void JobStore::finish(int64_t id, JobState state, std::optional<int> exit_code, const std::string& reason,
                      const EndDetails& details) {
  begin_immediate();
  try {
    record_release_locked(id);
    Statement s(m_db, "UPDATE jobs SET state = ?, exit_code = ?, reason = ?, ended_at = ?, failed_rank = ?, "
                      "final_batch = ?, final_samples_per_sec = ?, final_goodput = ?, final_noise_scale = ? "
                      "WHERE id = ? AND state NOT IN ('SUCCEEDED','FAILED','CANCELLED')");
    s.bind(1, to_string(state));
    if (exit_code) s.bind(2, *exit_code); else s.bind_null(2);
    s.bind(3, reason).bind(4, details.ended_at.value_or(now_seconds()));
    if (details.failed_rank) s.bind(5, *details.failed_rank); else s.bind_null(5);
    bind_metrics(s, 6, details.metrics);
    s.bind(10, id);
    s.step();
    commit();
  } catch (...) {
    rollback();
    throw;
  }
}

bool JobStore::cancel_where(int64_t id, const std::string& reason, int exit_code, const char* condition) {
  Statement s(m_db, fmt::format("UPDATE jobs SET state = 'CANCELLED', reason = ?, ended_at = ?, exit_code = ? WHERE "
                                "id = ? AND state = 'PENDING'{}",
                                condition));
  s.bind(1, reason).bind(2, now_seconds()).bind(3, exit_code).bind(4, id);
  s.step();
  return sqlite3_changes(m_db) > 0;
}

bool JobStore::cancel_pending(int64_t id, const std::string& reason, int exit_code) {
  return cancel_where(id, reason, exit_code, "");
}

bool JobStore::cancel_unsubmitted(int64_t id, const std::string& reason, int exit_code) {
  return cancel_where(id, reason, exit_code, " AND slurm = 1 AND slurm_id = 0");
}

Orphans JobStore::sweep(double pending_grace_seconds, const EndReader& recorded_end) {
  Orphans orphans;
  std::vector<JobRecord> active;
  {
    // A listing's columns: the sweep needs no job file or environment (kilobytes a job, read by
    // every waiting job's supervisor).
    Statement s(m_db, fmt::format("SELECT {} FROM jobs WHERE state IN ('PENDING','RUNNING','RESCALING') AND slurm = 0",
                                  job_list_columns()));
    while (s.step()) active.push_back(read_row(s));
  }
  double now = now_seconds();
  const int me = static_cast<int>(::geteuid());
  for (const auto& job : active) {
    if (job.state == JobState::pending) ++orphans.pending;
    // Another user's job is theirs to recover: a supervisor started here would run it as this
    // user, and /proc may hide their processes. (A store is its user's alone, check_own_home():
    // this holds should one be shared all the same.)
    if (job.submitted.owner_uid >= 0 && job.submitted.owner_uid != me) continue;
    if (job.supervisor.pid != 0 && job.supervisor.alive()) continue;
    if (job.state == JobState::pending) {
      if (job.supervisor.pid != 0 || now - job.submitted_at > pending_grace_seconds) {
        orphans.pending_without_supervisor.push_back(job.id);
      }
      continue;
    }
    if (recorded_end) {
      if (auto end = recorded_end(job)) {
        finish(job.id, end->state, end->exit_code, end->reason, {end->failed_rank, {}, end->ended_at});
        orphans.ended_unrecorded.push_back(job.id);
        continue;
      }
    }
    // 70, as submit --wait exits for it: dlrun itself failed.
    finish(job.id, JobState::failed, exit_code::k_internal,
           fmt::format("lost: its supervisor (pid {}) died; its ranks were killed with it", job.supervisor.pid));
    orphans.marked_lost.push_back(job.id);
  }
  return orphans;
}

}  // namespace dlrun::launcher
