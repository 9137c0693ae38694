// The elastic parts of the Supervisor: resizing on request, leaving out a GPU whose rank
// keeps failing, and the progress watchdog. See supervisor.hpp and docs/elastic.md.

#include <signal.h>
#include <sys/stat.h>

#include <algorithm>
#include <filesystem>
#include <string>
#include <vector>

#include <fmt/format.h>

#include "dlrun/log.hpp"
#include "dlrun/launcher/run_dir.hpp"
#include "dlrun/launcher/supervisor.hpp"
#include "dlrun/launcher/text.hpp"
#include "dlrun/protocol.hpp"

namespace dlrun::launcher {

void Supervisor::listen_for_resize() {
  m_resize_signal.async_wait([this](const boost::system::error_code& ec, int) {
    if (ec) return;
    on_resize_request();
    listen_for_resize();
  });
}

void Supervisor::on_resize_request() {
  // SIGUSR2 is also a signal users and batch systems send a job (Slurm's --signal=USR2@120):
  // without a request file it is theirs, for the ranks. (One that comes between `dlrun resize`
  // writing its request and signalling takes the request; the resize's own signal then finds
  // none and goes to the ranks in its place: they still get one.)
  if (!resize_requested(m_job.run_dir)) return pass_on(signals::k_resize_request);
  auto request = take_resize_request(m_job.run_dir);
  if (!request) {
    answer_resize("error: no valid resize request in " + m_job.run_dir + "/resize.request");
    return;
  }
  if (auto answer = resize(*request)) answer_resize(*answer);
}

void Supervisor::answer_resize(const std::string& answer) {
  write_resize_result(m_job.run_dir, answer);
}

std::optional<std::string> Supervisor::resize(const ResizeRequest& request) {
  if (m_job.planner) return "error: only jobs of one machine can be resized in this version";
  if (auto why = check_resize(request.world_size, m_job.min_world_size, m_job.max_world_size); !why.empty()) {
    return "error: " + why;
  }
  if (!m_held_gpu_ids.empty() && request.gpu_ids.empty() &&
      request.world_size > static_cast<int>(m_held_gpu_ids.size())) {
    return fmt::format("error: the job holds {} GPUs; growing a GPU job beyond them needs the queue (dlrun "
                       "submit), which knows what is free",
                       m_held_gpu_ids.size());
  }
  if (m_phase != Phase::running || m_pending_resize) {
    return "error: the job is stopping or restarting; try again in a moment";
  }
  if (request.world_size == m_job.world_size && (request.gpu_ids.empty() || request.gpu_ids == m_job.gpu_ids)) {
    return fmt::format("ok {}", m_job.world_size);  // nothing to change: the ranks go on
  }
  const bool announced = handles_stop(m_job.run_dir);
  if (!announced && request.unannounced == Unannounced::refuse && m_program_handles_stop) {
    // Restarted ranks say so again at their first step: a moment after a resize or a restart.
    return "error: the job's ranks are starting (they say that they handle the stop request at their first "
           "step, as its earlier ranks did); try again in a moment";
  }
  if (!announced && request.unannounced == Unannounced::refuse) {
    return std::string(k_resize_refused) +
           "its ranks have not said that they handle the stop request (no " + run_files::k_handles_stop +
           " in its run directory): resizing would kill them and restart them from their last checkpoint, "
           "if they save one. A program on the dlrun runtime says so when it first asks ctx.stop_requested() "
           "(every step, as docs/runtime.md's loop does): try again in a moment; any other program can say so "
           "(docs/elastic.md)";
  }
  m_pending_resize = request;
  m_resize_restarts = !announced;
  m_resize_killed = false;
  if (announced) {
    log::info("resizing from {} to {}: asking the ranks to checkpoint and stop", m_job.world_size,
              counted(request.world_size, "rank"));
    // The runtime stops every rank at the same step, checkpoints and exits with
    // exit_code::k_restart_me; whatever does not stop in the grace period is killed.
    m_group->signal_leaders(signals::k_stop_request);
  } else {
    log::warn("resizing from {} to {} by restarting the ranks: they have not said that they handle the "
              "stop request, so they get SIGTERM (SIGKILL after {:g} s) and start again from their last "
              "checkpoint, if they save one",
              m_job.world_size, counted(request.world_size, "rank"), m_job.options.grace_seconds);
    signal_members(SIGTERM);
  }
  m_phase = Phase::stopping;
  m_grace_timer.expires_after(std::chrono::duration_cast<std::chrono::steady_clock::duration>(
      std::chrono::duration<double>(m_job.options.grace_seconds)));
  m_grace_timer.async_wait([this](const boost::system::error_code& ec) {
    if (!ec) on_grace_expired();
  });
  record("rescaling", std::nullopt);
  if (m_job.on_rescale) m_job.on_rescale(true, m_job.world_size, m_job.gpu_ids);
  return std::nullopt;
}

void Supervisor::apply_resize() {
  ResizeRequest request = *m_pending_resize;
  m_pending_resize.reset();
  if (!request.gpu_ids.empty()) {
    m_job.gpu_ids = m_held_gpu_ids = request.gpu_ids;
  } else if (!m_held_gpu_ids.empty()) {
    m_job.gpu_ids.assign(m_held_gpu_ids.begin(), m_held_gpu_ids.begin() + request.world_size);
  }
  m_job.world_size = request.world_size;
  ++m_resizes;
  count_restart();
  start_attempt();
  record("running", std::nullopt);
  if (m_job.on_rescale) m_job.on_rescale(false, m_job.world_size, m_job.gpu_ids);
  log::info("now running {} rank{}", m_job.world_size, m_job.world_size == 1 ? "" : "s");
  const char* how = m_resize_restarts ? k_resize_restarted : m_resize_killed ? k_resize_killed : nullptr;
  answer_resize(fmt::format("ok {}{}", m_job.world_size, how ? std::string(" ") + how : std::string()));
}

bool Supervisor::leave_out_failing_gpu(const Failure& failure) {
  // A failure blamed on a rank's own error (blame_likelier_cause) is the program's, not a GPU's.
  if (m_job.gpu_ids.empty() || failure.index >= m_group->size() || failure.first) return false;
  const std::string gpu = m_job.gpu_ids.at(static_cast<size_t>(m_group->member(failure.index).spec.local_rank));
  if (!m_gpu_failures.count(gpu, m_job.world_size, m_job.min_world_size)) return false;
  m_job.gpu_ids.erase(std::find(m_job.gpu_ids.begin(), m_job.gpu_ids.end(), gpu));
  m_held_gpu_ids.erase(std::remove(m_held_gpu_ids.begin(), m_held_gpu_ids.end(), gpu), m_held_gpu_ids.end());
  m_job.world_size = static_cast<int>(m_job.gpu_ids.size());
  m_job.max_world_size = std::min(m_job.max_world_size, m_job.world_size);
  log::warn("leaving GPU {} out: its rank failed {} times in a row; continuing with {}", gpu,
            GpuFailures::k_failures_to_leave_out, counted(m_job.world_size, "rank"));
  return true;
}

void Supervisor::arm_watchdog() {
  if (m_job.options.watchdog_seconds <= 0) return;
  auto period = std::chrono::duration<double>(watchdog_period());
  m_watchdog_timer.expires_after(std::chrono::duration_cast<std::chrono::steady_clock::duration>(period));
  m_watchdog_timer.async_wait([this](const boost::system::error_code& ec) {
    if (ec) return;
    check_watchdog();
    if (m_phase == Phase::running) arm_watchdog();
  });
}

void Supervisor::check_watchdog() {
  if (m_phase != Phase::running || m_failure || !m_group) return;
  const auto now_steady = std::chrono::steady_clock::now();
  double since_start = std::chrono::duration<double>(now_steady - m_attempt_started).count();
  // A job stopped with Ctrl-Z made no progress meanwhile: counted from when it went on.
  const double since_resume =
      m_resumed_at ? std::chrono::duration<double>(now_steady - *m_resumed_at).count() : since_start;
  const auto now_wall = std::filesystem::file_time_type::clock::now();
  const double limit = m_job.options.watchdog_seconds;
  std::vector<size_t> idle_members;  // past the limit
  size_t running = 0, stalled = 0;   // stalled: within two checks of it
  bool any_reported = false;         // some rank of this attempt touched its progress file
  // The group's newest output: a program that does not report its progress (a plain PyTorch
  // script, where often only rank 0 prints) is judged by it, as a whole.
  std::optional<std::chrono::steady_clock::time_point> group_output;
  for (size_t i = 0; i < m_group->size(); ++i) {
    if (const auto wrote = m_group->last_output(i); wrote && (!group_output || *wrote > *group_output))
      group_output = wrote;
  }
  for (size_t i = 0; i < m_group->size(); ++i) {
    if (m_group->exit_status(i)) continue;
    ++running;
    const Member& member = m_group->member(i);
    double idle = since_start;
    std::error_code ec;
    auto mtime = std::filesystem::last_write_time(progress_file(m_job.run_dir, member.spec.rank), ec);
    bool reported = false;
    if (!ec) {
      const double age = std::chrono::duration<double>(now_wall - mtime).count();
      // (A file's time is the kernel's coarse clock, a few ms behind: a touch at the start
      // may look older than the start. An earlier attempt's last touch came well before.)
      reported = age < since_start + 0.1;
      any_reported = any_reported || reported;
      idle = std::min(idle, age);
    }
    if (!reported && group_output) {
      idle = std::min(idle, std::chrono::duration<double>(now_steady - *group_output).count());
    }
    idle = std::min(idle, since_resume);
    if (idle >= limit) idle_members.push_back(i);
    if (idle >= limit - 2 * watchdog_period()) ++stalled;
  }
  if (idle_members.empty()) return;
  const std::string source =
      m_job.options.source == SettingsSource::job_file ? "the job's watchdog" : "--watchdog";
  // Ranks that wait for one another in a collective stop within moments of each other: when
  // every one has, none is singled out (nor its GPU counted as failing).
  // Judged by the group's output, no rank is singled out either (nor its GPU).
  const bool whole_group = running > 1 && (stalled == running || !any_reported);
  std::string reason;
  if (whole_group) {
    reason = fmt::format("no rank made progress for {:g} s ({}): treating the job as failed", limit, source);
  } else {
    std::vector<std::string> who;
    for (size_t i : idle_members) who.push_back(m_group->member(i).name);
    reason = fmt::format("{} made no progress for {:g} s ({}): treating {} as failed", listed(who), limit, source,
                         idle_members.size() == 1 ? "it" : "them");
  }
  if (!any_reported) {
    reason += fmt::format(
        ". No rank has touched its progress file ({}) since it started, so their output counted as progress, and "
        "they wrote none for that long: a program on the dlrun runtime touches the file at every step; any other "
        "program may, or print as it trains (docs/elastic.md)",
        env::k_progress_file);
  } else if (whole_group) {
    // (It said "each rank's log says where it stopped": a hung rank writes nothing.)
    reason += fmt::format(
        " (they wait for one another: one rank stuck in its own work or I/O holds the others in their next "
        "collective; an evaluation between steps longer than {:g} s looks the same. Checkpoint saves count as "
        "progress; py-spy dump --pid PID shows where a Python rank stands)",
        limit);
  }
  log::error("{}", reason);
  m_failure = Failure{whole_group ? SIZE_MAX : idle_members.front(), ExitStatus::killed(SIGKILL), reason, {}, {}};
  stop_group(SIGTERM);
}

double Supervisor::watchdog_period() const { return std::min(1.0, m_job.options.watchdog_seconds / 4); }

}  // namespace dlrun::launcher
