#pragma once
// Machine-wide GPU claims: which GPUs the dlrun jobs of *other* stores hold now (another
// user's, or another DLRUN_HOME of the same user). A store knows its own jobs' GPUs; two
// people with private stores on one machine would otherwise both hand out GPU 0.
//
// A job's supervisor (dlrun local, a submitted job's supervisor, a dlrun run agent) makes, for
// each GPU its ranks run on, a file of its own, CLAIMS_DIR/dlrun-gpu-ID.UID.PID.RANDOM: created
// new under a hidden name (O_EXCL, mode 0644), written (its job and store), locked with an
// open-file-description write lock (fcntl F_OFD_SETLK), then renamed into place, so that every
// claim file in place is locked until its holder lets go. The kernel drops the lock when the
// process ends, however it ends, so a claim never outlives its job; the file is removed on
// release, or by its owner's next look once it is unlocked. Others probe each file's lock
// (F_OFD_GETLK); a file whose owner is not the uid its name gives counts for nothing, so only a
// user can claim in their own name, and only its owner (or root) can remove a claim from the
// sticky directory. Claims are advisory, as GPUs themselves are: a rank given a GPU another
// store's job holds (a list named with --gpus, or two stores choosing in the same instant)
// still runs, with a warning. docs/local.md, "GPUs shared with other users".
//
// CLAIMS_DIR: DLRUN_GPU_CLAIMS_DIR, else /dev/shm; with DLRUN_FAKE_GPUS (the tests' pretend
// GPUs) or inside a Slurm job (SLURM_JOB_ID: Slurm gives each job its GPUs) claims are off
// unless DLRUN_GPU_CLAIMS_DIR names a directory (made sticky and world-writable, as /tmp, when
// it does not exist).

#include <sys/types.h>

#include <map>
#include <optional>
#include <string>
#include <vector>

#include "dlrun/launcher/gpu_discovery.hpp"
#include "dlrun/launcher/rank_env.hpp"

namespace dlrun::launcher {

inline constexpr const char* k_gpu_claims_dir_env = "DLRUN_GPU_CLAIMS_DIR";
inline constexpr const char* k_default_gpu_claims_dir = "/dev/shm";

// How a GPU id of this process (an nvidia-smi number, as this process's view numbers its GPUs)
// names the GPU in a claim: by its UUID where NVML gives one, so that processes that number
// GPUs differently (a container that sees some of them, Slurm's device cgroup) agree; by the
// id itself otherwise.
struct GpuKeys {
  std::vector<std::string> uuids;  // by index: gpu_uuids()
  std::string key(const std::string& id) const;  // "1" -> "GPU-…"; anything else as it is
  std::string id(const std::string& key) const;  // back: "GPU-…" -> "1" if it is one of ours
  static GpuKeys here();                          // from gpu_uuids(): call once, NVML is slow
};

// Who holds a GPU, as its claim file says.
struct GpuClaimHolder {
  std::string gpu;   // printable ASCII (a name that decodes to anything else is no claim)
  pid_t pid = 0;
  uid_t uid = 0;
  std::string home;  // the holder's DLRUN_HOME, as its file says (describe() shows it printable)
  std::string job;   // its job number or id there
  double since = 0;  // when the file was put in place (its ctime, which its owner cannot set back)
};

// "user bob's dlrun job 4 (pid 1234)"; "your dlrun job 4 of DLRUN_HOME=/other/home (pid 1234)"
// for this user; "… dlrun run job 4 …" for a dlrun run agent's; another's text without control
// characters or bytes beyond ASCII.
std::string describe(const GpuClaimHolder& holder);

// The job this process runs inside, as a rank does: `env`'s DLRUN_JOB_ID, or "".
std::string inside_job_of(const Environment& env);

// The claims directory for `env`; empty when claims are off (pretend GPUs without a directory).
std::optional<std::string> gpu_claims_dir(const Environment& env);

// The GPUs that dlrun jobs of stores other than `home` hold now, by GPU id, each with every
// job that holds it. Not counted: a claim of this user's with this home (this store's: it
// knows its jobs; `home` empty: every claim counts, for a dlrun run agent, which asks no
// store), and one of the job `inside_job` names, of this store or a dlrun run (a run inside
// that job uses its GPUs). A dlrun run agent's claims belong to no store (home empty): they
// count for every store.
// Never throws: a directory that cannot be read has no claims in it.
using GpuClaimsByGpu = std::map<std::string, std::vector<GpuClaimHolder>>;
GpuClaimsByGpu gpu_claims_elsewhere(const std::string& dir, const std::string& home,
                                    const std::string& inside_job = {});
// The same for `env` (its claims directory, DLRUN_HOME and DLRUN_JOB_ID), by this process's GPU
// ids (`keys`: GpuKeys::here() when not given); empty when claims are off.
GpuClaimsByGpu gpu_claims_elsewhere(const Environment& env);
GpuClaimsByGpu gpu_claims_elsewhere(const Environment& env, const GpuKeys& keys);
// Claims by key (a file's name) as this process's GPU ids; those of GPUs it cannot see (a UUID
// that is none of its own) left out.
GpuClaimsByGpu by_id(GpuClaimsByGpu claims, const GpuKeys& keys);
// "user bob's dlrun job 4 (pid 9) and your dlrun job 2 of DLRUN_HOME=/x (pid 7)"
std::string describe(const std::vector<GpuClaimHolder>& holders);

// The claims one job's supervisor holds. Not copyable; released when destroyed (or at exit).
class GpuClaims {
 public:
  // `inside_job`: the job of this store this process runs inside (a rank's DLRUN_JOB_ID), whose
  // GPUs it uses without claiming them again.
  GpuClaims(std::string dir, std::string home, std::string job, std::string inside_job = {}, GpuKeys keys = {});
  // Claims for `env` (gpu_claims_dir, DLRUN_HOME, DLRUN_JOB_ID); one that holds nothing when
  // claims are off.
  static GpuClaims for_job(const Environment& env, const std::string& job);
  ~GpuClaims();
  GpuClaims(const GpuClaims&) = delete;
  GpuClaims& operator=(const GpuClaims&) = delete;
  GpuClaims(GpuClaims&&) noexcept;

  // Holds exactly `gpus` from now on (claims the new ones, releases the rest). Returns, for the
  // GPUs newly claimed that a job of another store holds too, one such holder each (both claims
  // stand: the caller decides, a queued job gives them back and waits). Each new GPU is claimed
  // before the others' claims are read, so of two processes that claim one at the same moment
  // at least one is told of the other. A GPU the job this process runs inside holds is neither
  // claimed nor returned. Problems with the directory are warned about once, never thrown: claims are
  // advisory.
  std::vector<GpuClaimHolder> hold(const std::vector<std::string>& gpus);
  // The GPUs this process holds a claim on now.
  std::vector<std::string> held() const;

 private:
  std::string m_dir, m_home, m_job, m_inside_job;
  GpuKeys m_keys;
  struct Claim {
    int fd = -1;       // locked
    std::string path;  // removed on release
  };
  std::map<std::string, Claim> m_claims;  // by GPU id
  bool m_warned = false;
};

// "user bob's dlrun job 4 (pid 1234) holds GPU 1; ..." one line per conflict, for a warning.
std::string sharing_warning(const std::vector<GpuClaimHolder>& conflicts);

// A pending GPU job's word to other stores' schedulers that it waits for GPUs they hold: a
// locked file in the claims directory (dlrun-want-MIN.UID.PID.RANDOM, job and home in it), gone
// when this object is (or the process); how long it has waited for them counts from the file's
// ctime. Other users' elastic jobs then shrink for it,
// down to their fair share of the machine (docs/scheduling.md). Nothing when claims are off.
class GpuWant {
 public:
  GpuWant(const Environment& env, const std::string& job, int gpus);
  ~GpuWant();
  GpuWant(const GpuWant&) = delete;
  GpuWant& operator=(const GpuWant&) = delete;
  GpuWant(GpuWant&&) noexcept;

 private:
  int m_fd = -1;
  std::string m_path;
};

struct GpuWantHolder {
  int gpus = 0;           // the waiting job's MIN
  GpuClaimHolder holder;  // whose (its gpu field: the same number)
};
// Other stores' pending jobs waiting for GPUs, oldest first.
std::vector<GpuWantHolder> gpu_wants_elsewhere(const Environment& env);

}  // namespace dlrun::launcher
