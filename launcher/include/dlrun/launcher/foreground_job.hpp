#pragma once
// A run in the foreground (`dlrun local`, `dlrun run`) is a job like a submitted one: it is
// recorded in the job store when it starts, under the next job number, with its own dlrun
// process as its supervisor, so that `dlrun status`, `logs`, `cancel` and `resize` know it by
// that number; its allocation, restarts, resizes and end are recorded as a submitted job's are
// (docs/jobs.md, "One job model"). `--resume JOB` takes an ended run up again under its own
// number and in its own run directory, where the runtime finds its checkpoint. A store that
// cannot be opened does not stop the run: it goes on under a time-stamped id, unlisted, and
// dlrun says so. Not thread-safe: one per run, in the process that supervises it.

#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "dlrun/launcher/job_store.hpp"
#include "dlrun/launcher/plan.hpp"
#include "dlrun/launcher/rank_env.hpp"

namespace dlrun::launcher {

// What a foreground run says of itself before its plan is made.
struct ForegroundCommand {
  JobOrigin origin = JobOrigin::local;
  std::string name;                // --name, else the program's file name
  std::vector<std::string> words;  // dlrun's words after the verb (--resume left out)
  std::string workdir;             // where it was started
  double grace_seconds = 30;
  bool uses_gpus = false;
  bool remote = false;  // dlrun run: its ranks are on other hosts (it holds no GPU here)
};

// An ended run to take up again (`--resume JOB`).
struct ResumeTarget {
  int64_t id = 0;
  std::string name;
  std::string run_dir;
  std::vector<std::string> words;  // its command line, to run again when none is given
  std::string workdir;
  int ranks = 0;  // what it last ran with
};

// The command line a foreground job keeps (its spec_text) and back. Throws ConfigError for
// text that is not one.
std::string encode_foreground_command(const std::vector<std::string>& words, double grace_seconds);
std::vector<std::string> decode_foreground_words(const std::string& spec_text);
double decode_foreground_grace(const std::string& spec_text);

// JOB for `--resume` (a job number, or a name: the newest job of that name). ConfigError when
// it names no job, another user's, one still running, one of another verb (`origin`), or one
// whose run directory is gone.
ResumeTarget find_resume_target(const Environment& env, const std::string& job, JobOrigin origin);

// What dlrun prints to say how a stopped or failed run is resumed: "dlrun local --resume 12".
std::string resume_hint(JobOrigin origin, const std::string& job_id);

class ForegroundJob {
 public:
  // Records a new run, or (with `resume`) checks that it can be taken up again.
  ForegroundJob(const Environment& env, const ForegroundCommand& command,
                std::optional<ResumeTarget> resume);
  // A run whose plan was refused is forgotten (a resumed one is left as it ended); one whose
  // supervisor did not say how it ended (an exception) is recorded FAILED.
  ~ForegroundJob();
  ForegroundJob(const ForegroundJob&) = delete;
  ForegroundJob& operator=(const ForegroundJob&) = delete;

  // The id to plan with: the job's number, or a time-stamped id when it is not recorded.
  const std::string& job_id() const { return m_job_id; }
  bool recorded() const { return m_number.has_value(); }
  // GPUs that other running jobs hold, leaving out the job this run is nested in (a rank of
  // it runs dlrun local: DLRUN_JOB_ID), whose GPUs are this run's to use. Empty unrecorded.
  std::vector<std::string> gpus_held_elsewhere(const Environment& env) const;
  // The plan is made: its ranks, GPUs and run directory are recorded, and its hooks keep the
  // store up to date (restarts, resizes, the end). Throws ConfigError when a resumed job was
  // taken up by someone else meanwhile.
  void attach(Plan& plan);
  // The run ended with dlrun's own error (`message`, exit code `code`: a rank that could not
  // be started, say) after attach(): recorded FAILED with them, so that dlrun status says what
  // the terminal said. Nothing before attach() (the run is forgotten) or after its end.
  void record_error(const std::string& message, int code);

 private:
  void record_end(const RunEnd& end);

  struct Store;
  std::unique_ptr<Store> m_store;  // empty: unrecorded
  ForegroundCommand m_command;
  std::optional<ResumeTarget> m_resume;
  std::optional<int64_t> m_number;
  std::string m_job_id;
  bool m_started = false;
  bool m_ended = false;
};

}  // namespace dlrun::launcher
