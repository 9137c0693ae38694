#pragma once
// Machine-wide GPU claims: which GPUs the dlrun jobs of *other* stores hold now (another
// user's, or another DLRUN_HOME of the same user). A store knows its own jobs' GPUs; two
// people with private stores on one machine would otherwise both hand out GPU 0.
//
// A job's supervisor (dlrun local, a submitted job's supervisor) holds one file per GPU it
// runs ranks on, CLAIMS_DIR/gpu-ID, under an open-file-description write lock (fcntl
// F_OFD_SETLK) for as long as it lives: the kernel drops the lock when the process ends, however
// it ends, so a claim never outlives its job. The file says who holds it (pid, user, store, job);
// others probe the lock (F_OFD_GETLK) and read that to skip the GPU or name its holder. The
// files are mode 0666 in a sticky, world-writable directory, so any user can claim a GPU
// another user's job has released. Claims are advisory, as GPUs themselves are: a rank given a
// GPU another store's job holds (a list named with --gpus, or two stores choosing in the same
// instant) still runs, with a warning. docs/local.md, "GPUs shared with other users".
//
// CLAIMS_DIR: DLRUN_GPU_CLAIMS_DIR, else /dev/shm/dlrun-gpu-claims; with DLRUN_FAKE_GPUS (the
// tests' pretend GPUs) claims are off unless DLRUN_GPU_CLAIMS_DIR names a directory.

#include <sys/types.h>

#include <map>
#include <optional>
#include <string>
#include <vector>

#include "dlrun/launcher/rank_env.hpp"

namespace dlrun::launcher {

inline constexpr const char* k_gpu_claims_dir_env = "DLRUN_GPU_CLAIMS_DIR";
inline constexpr const char* k_default_gpu_claims_dir = "/dev/shm/dlrun-gpu-claims";

// Who holds a GPU, as its claim file says.
struct GpuClaimHolder {
  std::string gpu;
  pid_t pid = 0;
  uid_t uid = 0;
  std::string home;  // the holder's DLRUN_HOME
  std::string job;   // its job number or id there
};

// "user bob's dlrun job 4 (pid 1234)"; "your dlrun job 4 in /other/home (pid 1234)" for this user.
std::string describe(const GpuClaimHolder& holder);

// The claims directory for `env`; empty when claims are off (pretend GPUs without a directory).
std::optional<std::string> gpu_claims_dir(const Environment& env);

// The GPUs that dlrun jobs of stores other than `home` hold now, by GPU id. Never throws: a
// directory that cannot be read has no claims in it.
std::map<std::string, GpuClaimHolder> gpu_claims_elsewhere(const std::string& dir, const std::string& home);
// The same for `env` (its claims directory and DLRUN_HOME); empty when claims are off.
std::map<std::string, GpuClaimHolder> gpu_claims_elsewhere(const Environment& env);

// The claims one job's supervisor holds. Not copyable; released when destroyed (or at exit).
class GpuClaims {
 public:
  GpuClaims(std::string dir, std::string home, std::string job);
  // Claims for `env` (gpu_claims_dir); one that holds nothing when claims are off.
  static GpuClaims for_job(const Environment& env, const std::string& job);
  ~GpuClaims();
  GpuClaims(const GpuClaims&) = delete;
  GpuClaims& operator=(const GpuClaims&) = delete;
  GpuClaims(GpuClaims&&) noexcept;

  // Holds exactly `gpus` from now on (claims the new ones, releases the rest). Returns the GPUs
  // of `gpus` a job of another store holds (their ranks will share them); a GPU held by a job
  // of this store (a run inside a job on that job's GPUs) is neither claimed nor returned.
  // Problems with the directory are warned about once, never thrown: claims are advisory.
  std::vector<GpuClaimHolder> hold(const std::vector<std::string>& gpus);
  // The GPUs this process holds a claim on now.
  std::vector<std::string> held() const;

 private:
  std::string m_dir, m_home, m_job;
  std::map<std::string, int> m_fds;  // GPU id -> its claim file, locked
  bool m_warned = false;
};

// "user bob's dlrun job 4 (pid 1234) holds GPU 1; ..." one line per conflict, for a warning.
std::string sharing_warning(const std::vector<GpuClaimHolder>& conflicts);

}  // namespace dlrun::launcher
