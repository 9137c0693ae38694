// The job store's side of sharing the machine: allocation changes and their history, pins,
// and the scheduler's lease (job_store.hpp; docs/scheduling.md, docs/job-store.md).

#include "dlrun/launcher/job_store.hpp"

#include "job_store_statement.hpp"

namespace dlrun::launcher {

void JobStore::start_locked(int64_t id, const Allocation& allocation, const std::string& run_dir) {
  const double now = now_seconds();
  Statement s(m_db, "UPDATE jobs SET state = 'RUNNING', ranks = ?, gpu_ids = ?, started_at = ?, run_dir = ? "
                    "WHERE id = ?");
  s.bind(1, allocation.ranks).bind(2, join(allocation.gpu_ids)).bind(3, now).bind(4, run_dir).bind(5, id);
  s.step();
  Statement event(m_db, "INSERT INTO allocations (job, at, ranks, gpu_ids, cause) "
                        "SELECT id, ?, ?, ?, 'start' FROM jobs WHERE id = ? AND remote = 0 AND slurm = 0");
  event.bind(1, now).bind(2, allocation.ranks).bind(3, join(allocation.gpu_ids)).bind(4, id);
  event.step();
}

void JobStore::write_allocation_locked(int64_t id, const Allocation& allocation, const std::string& cause) {
  const double now = now_seconds();
  Statement s(m_db, "UPDATE jobs SET ranks = ?, gpu_ids = ?, resized_at = ? WHERE id = ?");
  s.bind(1, allocation.ranks).bind(2, join(allocation.gpu_ids)).bind(3, now).bind(4, id);
  s.step();
  Statement event(m_db, "INSERT INTO allocations (job, at, ranks, gpu_ids, cause) "
                        "SELECT id, ?, ?, ?, ? FROM jobs WHERE id = ? AND remote = 0 AND slurm = 0 "
                        "AND state IN ('RUNNING','RESCALING')");
  event.bind(1, now).bind(2, allocation.ranks).bind(3, join(allocation.gpu_ids)).bind(4, cause).bind(5, id);
  event.step();
}

bool JobStore::requeue(int64_t id, const std::string& reason) {
  begin_immediate();
  try {
    Statement event(m_db, "INSERT INTO allocations (job, at, ranks, gpu_ids, cause) "
                          "SELECT id, ?, 0, '', 'requeued' FROM jobs WHERE id = ? AND remote = 0 AND slurm = 0 "
                          "AND state = 'RUNNING'");
    event.bind(1, now_seconds()).bind(2, id);
    event.step();
    Statement s(m_db, "UPDATE jobs SET state = 'PENDING', ranks = 0, gpu_ids = '', started_at = 0, reason = ? "
                      "WHERE id = ? AND state = 'RUNNING'");
    s.bind(1, reason).bind(2, id);
    s.step();
    const bool changed = sqlite3_changes(m_db) > 0;
    commit();
    return changed;
  } catch (...) {
    rollback();
    throw;
  }
}

void JobStore::record_release_locked(int64_t id) {
  Statement event(m_db, "INSERT INTO allocations (job, at, ranks, gpu_ids, cause) "
                        "SELECT id, ?, 0, '', 'end' FROM jobs WHERE id = ? AND remote = 0 AND slurm = 0 "
                        "AND state IN ('RUNNING','RESCALING')");
  event.bind(1, now_seconds()).bind(2, id);
  event.step();
}

std::optional<Allocation> JobStore::start_scheduled(int64_t id, int ranks, const Capacity& capacity,
                                                    const std::string& run_dir) {
  begin_immediate();
  try {
    auto job = get(id);
    std::optional<Allocation> allocation;
    if (job && job->state == JobState::pending) {
      ResourceRequest request = job->submitted.request;
      request.min_ranks = request.max_ranks = ranks;
      allocation = fit(request, capacity, usage_locked());
      if (allocation) start_locked(id, *allocation, run_dir);
    }
    commit();
    return allocation;
  } catch (...) {
    rollback();
    throw;
  }
}

void JobStore::set_pinned(int64_t id, int ranks) {
  Statement s(m_db, "UPDATE jobs SET pinned = ? WHERE id = ?");
  s.bind(1, ranks).bind(2, id);
  s.step();
}

std::vector<AllocationEvent> JobStore::allocation_history(double since) {
  std::vector<AllocationEvent> events;
  // The events since then, and what each job still held then (its last event before, when it
  // held ranks): a window that begins while a job runs shows that job from its first column.
  Statement s(m_db, "SELECT a.job, j.name, a.at, a.ranks, a.gpu_ids, a.cause FROM allocations a "
                    "JOIN jobs j ON j.id = a.job WHERE a.at >= ?1 OR (a.ranks > 0 AND a.seq IN "
                    "(SELECT MAX(seq) FROM allocations WHERE at < ?1 GROUP BY job)) ORDER BY a.seq");
  s.bind(1, since);
  while (s.step()) {
    events.push_back({s.int64(0), s.text(1), s.real(2), static_cast<int>(s.int64(3)), split_ids(s.text(4)),
                      s.text(5)});
  }
  return events;
}

bool JobStore::take_scheduler_lease(const ProcessIdentity& me) {
  begin_immediate();
  try {
    bool mine = true;
    Statement holder(m_db, "SELECT pid, start FROM scheduler_lease WHERE one = 1");
    if (holder.step()) {
      ProcessIdentity other{static_cast<pid_t>(holder.int64(0)), static_cast<uint64_t>(holder.int64(1))};
      const bool is_me = other.pid == me.pid && other.start_time == me.start_time;
      mine = is_me || !other.alive();
    }
    if (mine) {
      Statement take(m_db, "INSERT INTO scheduler_lease (one, pid, start, since) VALUES (1, ?, ?, ?) "
                           "ON CONFLICT(one) DO UPDATE SET pid = excluded.pid, start = excluded.start, "
                           "since = excluded.since WHERE pid != excluded.pid OR start != excluded.start");
      take.bind(1, static_cast<int64_t>(me.pid)).bind(2, static_cast<int64_t>(me.start_time)).bind(3, now_seconds());
      take.step();
    }
    commit();
    return mine;
  } catch (...) {
    rollback();
    throw;
  }
}

bool JobStore::has_active_goodput_jobs() {
  Statement s(m_db, "SELECT 1 FROM jobs WHERE policy = 'goodput' AND slurm = 0 AND state IN "
                    "('PENDING','RUNNING','RESCALING') LIMIT 1");
  return s.step();
}

std::optional<ProcessIdentity> JobStore::scheduler_lease_holder() {
  Statement holder(m_db, "SELECT pid, start FROM scheduler_lease WHERE one = 1");
  if (!holder.step()) return std::nullopt;
  ProcessIdentity other{static_cast<pid_t>(holder.int64(0)), static_cast<uint64_t>(holder.int64(1))};
  if (!other.alive()) return std::nullopt;
  return other;
}

void JobStore::release_scheduler_lease(const ProcessIdentity& me) {
  Statement s(m_db, "DELETE FROM scheduler_lease WHERE one = 1 AND pid = ? AND start = ?");
  s.bind(1, static_cast<int64_t>(me.pid)).bind(2, static_cast<int64_t>(me.start_time));
  s.step();
}

}  // namespace dlrun::launcher
