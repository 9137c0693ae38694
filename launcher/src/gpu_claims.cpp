#include "dlrun/launcher/gpu_claims.hpp"

#include <dirent.h>
#include <fcntl.h>
#include <pwd.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <utility>

#include <fmt/format.h>
#include <fmt/ranges.h>

#include "dlrun/launcher/run_dir.hpp"
#include "dlrun/launcher/text.hpp"
#include "dlrun/log.hpp"
#include "dlrun/protocol.hpp"

namespace dlrun::launcher {
namespace {

constexpr const char* k_prefix = "gpu-";
constexpr size_t k_max_claim_bytes = 4096;

// A GPU id as a file name: nvidia-smi numbers and UUIDs are kept, anything else becomes '_'.
std::string file_name(const std::string& gpu) {
  std::string name = k_prefix;
  for (char c : gpu) {
    const bool plain = (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '-' ||
                       c == '.' || c == '_';
    name += plain ? c : '_';
  }
  return name;
}

struct flock whole_file(short type) {
  struct flock lock {};
  lock.l_type = type;
  lock.l_whence = SEEK_SET;
  lock.l_start = 0;
  lock.l_len = 0;
  lock.l_pid = 0;  // required by F_OFD_*
  return lock;
}

// Creates the directory (sticky and world-writable, as /tmp: every user's claims live in it).
// Returns what is wrong with it, or empty.
std::string ensure_dir(const std::string& dir) {
  struct stat st {};
  if (::lstat(dir.c_str(), &st) != 0) {
    if (errno != ENOENT) return fmt::format("{}: {}", dir, std::strerror(errno));
    if (::mkdir(dir.c_str(), 0777) != 0 && errno != EEXIST) return fmt::format("{}: {}", dir, std::strerror(errno));
    ::chmod(dir.c_str(), 01777);  // past the umask; fails harmlessly if another user made it meanwhile
    if (::lstat(dir.c_str(), &st) != 0) return fmt::format("{}: {}", dir, std::strerror(errno));
  }
  if (!S_ISDIR(st.st_mode)) return fmt::format("{} is not a directory", dir);
  return {};
}

// What a claim file says of its holder (empty fields while its holder is still writing it).
GpuClaimHolder read_holder(int fd, const std::string& fallback_gpu) {
  GpuClaimHolder holder;
  holder.gpu = fallback_gpu;
  std::string text(k_max_claim_bytes, '\0');
  const ssize_t n = ::pread(fd, text.data(), text.size(), 0);
  text.resize(n > 0 ? static_cast<size_t>(n) : 0);
  size_t start = 0;
  while (start < text.size()) {
    size_t end = text.find('\n', start);
    if (end == std::string::npos) end = text.size();
    const std::string line = text.substr(start, end - start);
    start = end + 1;
    const size_t eq = line.find('=');
    if (eq == std::string::npos) continue;
    const std::string key = line.substr(0, eq), value = line.substr(eq + 1);
    if (key == "gpu" && !value.empty()) holder.gpu = value;
    if (key == "job") holder.job = value;
    if (key == "home") holder.home = value;
    if (key == "pid") holder.pid = static_cast<pid_t>(parse_int(value).value_or(0));
    if (key == "uid") holder.uid = static_cast<uid_t>(parse_int(value).value_or(0));
  }
  return holder;
}

// True when another open file description holds the claim's lock.
bool locked_elsewhere(int fd) {
  struct flock probe = whole_file(F_WRLCK);
  return ::fcntl(fd, F_OFD_GETLK, &probe) == 0 && probe.l_type != F_UNLCK;
}

// A regular file opened without following a link, without blocking on a FIFO.
int open_claim(const std::string& path, int flags) {
  int fd = ::open(path.c_str(), flags | O_NOFOLLOW | O_CLOEXEC | O_NONBLOCK, 0666);
  if (fd < 0) return -1;
  struct stat st {};
  if (::fstat(fd, &st) != 0 || !S_ISREG(st.st_mode)) {
    ::close(fd);
    errno = EINVAL;
    return -1;
  }
  return fd;
}

std::string user_name(uid_t uid) {
  struct passwd pw {};
  struct passwd* found = nullptr;
  char buffer[1024];
  if (::getpwuid_r(uid, &pw, buffer, sizeof buffer, &found) == 0 && found != nullptr) return found->pw_name;
  return fmt::format("uid {}", uid);
}

}  // namespace

std::string describe(const GpuClaimHolder& holder) {
  if (holder.pid == 0) return "another dlrun job (its claim is being written)";
  const std::string job = holder.job.empty() ? "" : " " + holder.job;
  if (holder.uid == ::geteuid()) {
    return fmt::format("your dlrun job{} of DLRUN_HOME={} (pid {})", job, holder.home, holder.pid);
  }
  return fmt::format("user {}'s dlrun job{} (pid {})", user_name(holder.uid), job, holder.pid);
}

std::optional<std::string> gpu_claims_dir(const Environment& env) {
  if (auto it = env.find(k_gpu_claims_dir_env); it != env.end()) {
    if (it->second.empty()) return std::nullopt;  // set empty: claims off
    return it->second;
  }
  if (env.count(env::k_fake_gpus)) return std::nullopt;
  return std::string(k_default_gpu_claims_dir);
}

std::map<std::string, GpuClaimHolder> gpu_claims_elsewhere(const std::string& dir, const std::string& home) {
  std::map<std::string, GpuClaimHolder> claims;
  DIR* listing = ::opendir(dir.c_str());
  if (listing == nullptr) return claims;
  const std::string mine = plain_path(home);
  while (const dirent* entry = ::readdir(listing)) {
    const std::string name = entry->d_name;
    if (name.rfind(k_prefix, 0) != 0) continue;
    const int fd = open_claim(dir + "/" + name, O_RDONLY);
    if (fd < 0) continue;
    if (locked_elsewhere(fd)) {
      GpuClaimHolder holder = read_holder(fd, name.substr(std::strlen(k_prefix)));
      if (holder.home.empty() || plain_path(holder.home) != mine) claims[holder.gpu] = holder;
    }
    ::close(fd);
  }
  ::closedir(listing);
  return claims;
}

std::map<std::string, GpuClaimHolder> gpu_claims_elsewhere(const Environment& env) {
  auto dir = gpu_claims_dir(env);
  if (!dir) return {};
  return gpu_claims_elsewhere(*dir, dlrun_home(env));
}

GpuClaims::GpuClaims(std::string dir, std::string home, std::string job)
    : m_dir(std::move(dir)), m_home(plain_path(home)), m_job(std::move(job)) {}

GpuClaims GpuClaims::for_job(const Environment& env, const std::string& job) {
  return GpuClaims(gpu_claims_dir(env).value_or(""), dlrun_home(env), job);
}

GpuClaims::GpuClaims(GpuClaims&& other) noexcept
    : m_dir(std::move(other.m_dir)),
      m_home(std::move(other.m_home)),
      m_job(std::move(other.m_job)),
      m_fds(std::move(other.m_fds)),
      m_warned(other.m_warned) {
  other.m_fds.clear();
}

GpuClaims::~GpuClaims() {
  for (const auto& [gpu, fd] : m_fds) ::close(fd);
}

std::vector<GpuClaimHolder> GpuClaims::hold(const std::vector<std::string>& gpus) {
  std::vector<GpuClaimHolder> conflicts;
  if (m_dir.empty()) return conflicts;
  for (auto it = m_fds.begin(); it != m_fds.end();) {
    if (std::find(gpus.begin(), gpus.end(), it->first) != gpus.end()) {
      ++it;
      continue;
    }
    ::close(it->second);  // the lock goes with it
    it = m_fds.erase(it);
  }
  auto warn = [&](const std::string& what) {
    if (!m_warned) log::warn("GPUs are not claimed machine-wide, so other users' dlrun may choose them too: {}", what);
    m_warned = true;
  };
  if (gpus.empty()) return conflicts;
  if (auto problem = ensure_dir(m_dir); !problem.empty()) {
    warn(problem);
    return conflicts;
  }
  for (const auto& gpu : gpus) {
    if (m_fds.count(gpu)) continue;
    const std::string path = m_dir + "/" + file_name(gpu);
    const int fd = open_claim(path, O_RDWR | O_CREAT);
    if (fd < 0) {
      warn(fmt::format("{}: {}", path, std::strerror(errno)));
      continue;
    }
    struct stat st {};
    if (::fstat(fd, &st) == 0 && st.st_uid == ::geteuid() && (st.st_mode & 07777) != 0666) ::fchmod(fd, 0666);
    struct flock lock = whole_file(F_WRLCK);
    if (::fcntl(fd, F_OFD_SETLK, &lock) != 0) {
      if (errno != EAGAIN && errno != EACCES) warn(fmt::format("{}: {}", path, std::strerror(errno)));
      GpuClaimHolder holder = read_holder(fd, gpu);
      ::close(fd);
      if (holder.home.empty() || plain_path(holder.home) != m_home) conflicts.push_back(holder);
      continue;
    }
    const std::string text = fmt::format("gpu={}\npid={}\nuid={}\njob={}\nhome={}\n", gpu, ::getpid(), ::geteuid(),
                                         m_job, m_home);
    if (::ftruncate(fd, 0) != 0 || ::pwrite(fd, text.data(), text.size(), 0) != static_cast<ssize_t>(text.size())) {
      warn(fmt::format("{}: {}", path, std::strerror(errno)));
    }
    m_fds[gpu] = fd;
  }
  return conflicts;
}

std::vector<std::string> GpuClaims::held() const {
  std::vector<std::string> gpus;
  for (const auto& [gpu, fd] : m_fds) gpus.push_back(gpu);
  return gpus;
}

std::string sharing_warning(const std::vector<GpuClaimHolder>& conflicts) {
  std::vector<std::string> parts;
  for (const auto& holder : conflicts) parts.push_back(fmt::format("GPU {} is in use by {}", holder.gpu, describe(holder)));
  return fmt::format("{}: {}", fmt::join(parts, "; "),
                     conflicts.size() == 1 ? "the two jobs share it" : "the jobs share them");
}

}  // namespace dlrun::launcher
