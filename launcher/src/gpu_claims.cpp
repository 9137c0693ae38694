#include "dlrun/launcher/gpu_claims.hpp"

#include <dirent.h>
#include <fcntl.h>
#include <pwd.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <charconv>
#include <chrono>
#include <cstdio>
#include <filesystem>
#include <random>
#include <cctype>
#include <cerrno>
#include <cstring>
#include <cstdlib>
#include <tuple>
#include <utility>

#include <fmt/format.h>
#include <fmt/ranges.h>

#include "dlrun/launcher/run_dir.hpp"
#include "dlrun/log.hpp"
#include "dlrun/protocol.hpp"

namespace dlrun::launcher {
namespace {

constexpr std::string_view k_prefix = "dlrun-gpu-";
constexpr std::string_view k_want_prefix = "dlrun-want-";  // a waiting job's: its MIN, where a GPU's id goes
constexpr size_t k_max_claim_bytes = 4096;
constexpr size_t k_max_field = 256;

bool plain(char c) { return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '-'; }

// A GPU id in a file name: nvidia-smi numbers and UUIDs as they are, any other byte as _xx
// (so that the name's dots separate its parts and two ids never share a name).
std::string encode(const std::string& gpu) {
  std::string out;
  for (unsigned char c : gpu) out += plain(static_cast<char>(c)) ? std::string(1, static_cast<char>(c)) : fmt::format("_{:02x}", c);
  return out;
}

std::optional<std::string> decode(std::string_view text) {
  std::string out;
  for (size_t i = 0; i < text.size(); ++i) {
    if (plain(text[i])) {
      out += text[i];
      continue;
    }
    if (text[i] != '_' || i + 2 >= text.size() || !std::isxdigit(static_cast<unsigned char>(text[i + 1])) ||
        !std::isxdigit(static_cast<unsigned char>(text[i + 2])))
      return std::nullopt;
    const int byte = std::stoi(std::string(text.substr(i + 1, 2)), nullptr, 16);
    if (byte < 0x20 || byte > 0x7e) return std::nullopt;  // an id is printable ASCII: nothing for a terminal to obey
    out += static_cast<char>(byte);
    i += 2;
  }
  if (out.empty()) return std::nullopt;
  return out;
}

// dlrun-gpu-ID.UID.PID.RANDOM (the random part: two pid namespaces sharing the directory
// never make one name).
struct ClaimName {
  std::string gpu;
  uid_t uid = 0;
  pid_t pid = 0;
};

template <typename T>
std::optional<T> whole_number(std::string_view text) {
  T value{};
  auto [end, ec] = std::from_chars(text.data(), text.data() + text.size(), value);
  if (ec != std::errc() || end != text.data() + text.size() || text.empty()) return std::nullopt;
  return value;
}

std::string random_hex() {
  try {
    std::random_device device;
    return fmt::format("{:08x}{:08x}", device(), device());
  } catch (const std::exception&) {  // no entropy source: the pid and the clock differ enough
    static unsigned counter = 0;
    return fmt::format("{:08x}{:08x}", static_cast<unsigned>(::getpid()) ^ ++counter,
                       static_cast<unsigned>(std::chrono::steady_clock::now().time_since_epoch().count()));
  }
}

std::string name_of(const std::string& gpu, std::string_view prefix = k_prefix) {
  return fmt::format("{}{}.{}.{}.{}", prefix, encode(gpu), ::geteuid(), ::getpid(), random_hex());
}

std::optional<ClaimName> parse_name(std::string_view name, std::string_view prefix) {
  if (name.substr(0, prefix.size()) != prefix) return std::nullopt;
  name.remove_prefix(prefix.size());
  std::vector<std::string_view> parts;
  for (size_t start = 0;;) {
    const size_t dot = name.find('.', start);
    parts.push_back(name.substr(start, dot == std::string_view::npos ? std::string_view::npos : dot - start));
    if (dot == std::string_view::npos) break;
    start = dot + 1;
  }
  if (parts.size() != 4 || parts[3].empty()) return std::nullopt;
  auto gpu = decode(parts[0]);
  auto uid = whole_number<uid_t>(parts[1]);
  auto pid = whole_number<pid_t>(parts[2]);
  if (!gpu || !uid || !pid || *pid <= 0) return std::nullopt;
  return ClaimName{*gpu, *uid, *pid};
}

// Two homes alike, without touching the file system (another's text may name anything; a
// relative path is compared as written).
bool same_home(const std::string& a, const std::string& b) {
  auto plain = [](const std::string& path) {
    std::string text = std::filesystem::path(path).lexically_normal().string();
    while (text.size() > 1 && text.back() == '/') text.pop_back();
    return text;
  };
  return plain(a) == plain(b);
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

// Creates a directory DLRUN_GPU_CLAIMS_DIR names (sticky and world-writable, as /tmp: every
// user's claims live in it). Returns what is wrong with it, or empty.
std::string ensure_dir(const std::string& dir) {
  struct stat st {};
  if (::lstat(dir.c_str(), &st) != 0) {
    if (errno != ENOENT) return fmt::format("{}: {}", dir, std::strerror(errno));
    // Missing parents are made too, open to every user (0755), as the directory must be.
    const std::filesystem::path leaf(dir);
    std::filesystem::path partial;
    for (auto it = leaf.begin(); it != leaf.end(); ++it) {
      partial /= *it;
      if (partial == leaf || partial == partial.root_path()) continue;
      if (::mkdir(partial.c_str(), 0755) == 0) ::chmod(partial.c_str(), 0755);
    }
    if (::mkdir(dir.c_str(), 0777) != 0 && errno != EEXIST) return fmt::format("{}: {}", dir, std::strerror(errno));
    // Past the umask, on the directory made here only: a link put there meanwhile (to a directory
    // of this user's) is not followed, and one another user made is left as it is.
    const int fd = ::open(dir.c_str(), O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
    if (fd >= 0) {
      struct stat made {};
      if (::fstat(fd, &made) == 0 && made.st_uid == ::geteuid()) ::fchmod(fd, 01777);
      ::close(fd);
    }
    if (::lstat(dir.c_str(), &st) != 0) return fmt::format("{}: {}", dir, std::strerror(errno));
  }
  if (!S_ISDIR(st.st_mode)) return fmt::format("{} is not a directory", dir);
  return {};
}

// What makes claims in `dir` unsafe though they can be made, or empty.
std::string weakness_of(const std::string& dir) {
  struct stat st {};
  if (::stat(dir.c_str(), &st) != 0) return {};
  if ((st.st_mode & S_IWOTH) && !(st.st_mode & S_ISVTX)) {
    return fmt::format("{} is writable by every user but not sticky (chmod +t): other users can remove claims from it",
                       dir);
  }
  // A sticky directory's owner may remove every file in it: the first user's dlrun made it.
  if (st.st_uid != 0 && st.st_uid != ::geteuid()) {
    return fmt::format("{} belongs to uid {}, who can remove every user's claims from it: let root make it "
                       "(install -d -m 1777 DIR)",
                       dir, st.st_uid);
  }
  return {};
}

// Another's text shown on this terminal: printable ASCII (no C0 or C1 controls, which a byte
// beyond ASCII may be part of), a bounded length.
std::string printable(std::string text) {
  if (text.size() > k_max_field) text.resize(k_max_field);
  for (char& c : text) {
    const auto byte = static_cast<unsigned char>(c);
    if (byte < 0x20 || byte > 0x7e) c = '?';
  }
  return text;
}

void read_fields(int fd, GpuClaimHolder& holder) {
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
    const std::string key = line.substr(0, eq), value = line.substr(eq + 1, k_max_field);
    if (key == "job") holder.job = value;
    if (key == "home") holder.home = value;
  }
}

// Every claim held now in `dir`. A file whose owner is not the uid its name gives is no claim:
// only its owner can write one in a user's name. A claim file is in place only once locked, so
// one of this user's that is unlocked is a claim let go (its process ended): it is removed.
std::vector<GpuClaimHolder> held_claims(const std::string& dir, std::string_view prefix = k_prefix) {
  std::vector<GpuClaimHolder> claims;
  DIR* listing = ::opendir(dir.c_str());
  if (listing == nullptr) return claims;
  const uid_t me = ::geteuid();
  while (const dirent* entry = ::readdir(listing)) {
    auto name = parse_name(entry->d_name, prefix);
    if (!name) continue;
    const std::string path = dir + "/" + entry->d_name;
    const int fd = ::open(path.c_str(), O_RDONLY | O_NOFOLLOW | O_CLOEXEC | O_NONBLOCK);
    if (fd < 0) continue;
    struct stat st {};
    struct flock probe = whole_file(F_WRLCK);
    if (::fstat(fd, &st) == 0 && S_ISREG(st.st_mode) && st.st_uid == name->uid) {
      if (::fcntl(fd, F_OFD_GETLK, &probe) == 0 && probe.l_type != F_UNLCK) {
        GpuClaimHolder holder{name->gpu, name->pid, name->uid, {}, {}};
        read_fields(fd, holder);
        // When it was put in place (the rename): its owner cannot set that back, as a time
        // written in the file, or its mtime, could be.
        holder.since = static_cast<double>(st.st_ctim.tv_sec) + 1e-9 * static_cast<double>(st.st_ctim.tv_nsec);
        claims.push_back(std::move(holder));
      } else if (name->uid == me) {
        ::unlink(path.c_str());  // left by a dlrun killed with SIGKILL
      }
    }
    ::close(fd);
  }
  ::closedir(listing);
  return claims;
}

// A claim of this store: this user's, with this home.
bool of_store(const GpuClaimHolder& holder, const std::string& home) {
  return holder.uid == ::geteuid() && !holder.home.empty() && same_home(holder.home, home);
}

// A claim of the job this process runs inside (`inside_job`, a rank's DLRUN_JOB_ID): this
// user's, that job number, of this store or of a dlrun run (no store's).
bool of_job(const GpuClaimHolder& holder, const std::string& home, const std::string& inside_job) {
  return !inside_job.empty() && holder.uid == ::geteuid() && holder.job == inside_job &&
         (holder.home.empty() || same_home(holder.home, home));
}

// Made under a hidden name, written, locked, then put in place: a claim file in place is locked
// until its holder lets go, and no one reads half of one. The locked descriptor, or -1 with
// `problem` said.
int place_locked_file(const std::string& dir, const std::string& path, const std::string& text, std::string& problem) {
  const std::string hidden = fmt::format("{}/.dlrun-claim-{}", dir, random_hex());
  const int fd = ::open(hidden.c_str(), O_RDWR | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, 0644);
  if (fd < 0) {
    problem = fmt::format("{}: {}", hidden, std::strerror(errno));
    return -1;
  }
  ::fchmod(fd, 0644);  // readable by every user whatever the umask: that is what it is for
  struct flock lock = whole_file(F_WRLCK);
  if (::pwrite(fd, text.data(), text.size(), 0) != static_cast<ssize_t>(text.size()) ||
      ::fcntl(fd, F_OFD_SETLK, &lock) != 0 ||
      ::renameat2(AT_FDCWD, hidden.c_str(), AT_FDCWD, path.c_str(), RENAME_NOREPLACE) != 0) {
    problem = fmt::format("{}: {}", path, std::strerror(errno));
    ::unlink(hidden.c_str());
    ::close(fd);
    return -1;
  }
  return fd;
}

std::string user_name(uid_t uid) {
  struct passwd pw {};
  struct passwd* found = nullptr;
  char buffer[1024];
  if (::getpwuid_r(uid, &pw, buffer, sizeof buffer, &found) == 0 && found != nullptr) return printable(found->pw_name);
  return fmt::format("uid {}", uid);
}

}  // namespace

std::string GpuKeys::key(const std::string& id) const {
  auto index = whole_number<size_t>(id);
  if (index && *index < uuids.size() && !uuids[*index].empty()) return uuids[*index];
  return id;
}

std::string GpuKeys::id(const std::string& key) const {
  for (size_t i = 0; i < uuids.size(); ++i) {
    if (!uuids[i].empty() && uuids[i] == key) return std::to_string(i);
  }
  return key;
}

GpuKeys GpuKeys::here() { return GpuKeys{gpu_uuids()}; }

GpuClaimsByGpu by_id(GpuClaimsByGpu claims, const GpuKeys& keys) {
  if (keys.uuids.empty()) return claims;
  GpuClaimsByGpu ids;
  for (auto& [key, holders] : claims) {
    const std::string id = keys.id(key);
    // A UUID that is none of this process's GPUs names one it cannot see: none of its business.
    if (id == key && (key.rfind("GPU-", 0) == 0 || key.rfind("MIG-", 0) == 0)) continue;
    for (auto& holder : holders) {
      holder.gpu = id;
      ids[id].push_back(std::move(holder));
    }
  }
  return ids;
}

std::string describe(const GpuClaimHolder& holder) {
  const std::string job = holder.job.empty() ? "" : " " + printable(holder.job);
  const bool run = holder.home.empty();  // a dlrun run agent's: no store's
  if (holder.uid == ::geteuid()) {
    if (run) return fmt::format("your dlrun run job{} (pid {})", job, holder.pid);
    return fmt::format("your dlrun job{} of DLRUN_HOME={} (pid {})", job, printable(holder.home), holder.pid);
  }
  return fmt::format("user {}'s dlrun{} job{} (pid {})", user_name(holder.uid), run ? " run" : "", job, holder.pid);
}

std::string describe(const std::vector<GpuClaimHolder>& holders) {
  std::vector<std::string> parts;
  for (const auto& holder : holders) parts.push_back(describe(holder));
  return fmt::format("{}", fmt::join(parts, " and "));
}

std::string inside_job_of(const Environment& env) {
  auto it = env.find(env::k_job_id);
  return it == env.end() ? std::string() : it->second;
}

std::optional<std::string> gpu_claims_dir(const Environment& env) {
  if (auto it = env.find(k_gpu_claims_dir_env); it != env.end()) {
    if (it->second.empty()) return std::nullopt;  // set empty: claims off
    if (it->second.front() != '/') {
      // Relative, each user's dlrun would look in another place, depending on where it runs.
      static bool warned = false;
      if (!warned) {
        log::warn("{}={} is not an absolute path: GPUs are not claimed machine-wide", k_gpu_claims_dir_env,
                  printable(it->second));
      }
      warned = true;
      return std::nullopt;
    }
    return it->second;
  }
  // Pretend GPUs are no one's; under Slurm each job's GPUs are its own already.
  if (env.count(env::k_fake_gpus) || env.count("SLURM_JOB_ID")) return std::nullopt;
  return std::string(k_default_gpu_claims_dir);
}

GpuClaimsByGpu gpu_claims_elsewhere(const std::string& dir, const std::string& home, const std::string& inside_job) {
  GpuClaimsByGpu claims;
  for (auto& holder : held_claims(dir)) {
    if ((!home.empty() && of_store(holder, home)) || of_job(holder, home, inside_job)) continue;
    claims[holder.gpu].push_back(std::move(holder));
  }
  // In an order that does not depend on the directory's (each name has a random part).
  for (auto& [gpu, holders] : claims) {
    std::sort(holders.begin(), holders.end(), [](const GpuClaimHolder& a, const GpuClaimHolder& b) {
      return std::tie(a.uid, a.home, a.job, a.pid) < std::tie(b.uid, b.home, b.job, b.pid);
    });
  }
  return claims;
}

GpuClaimsByGpu gpu_claims_elsewhere(const Environment& env, const GpuKeys& keys) {
  auto dir = gpu_claims_dir(env);
  if (!dir) return {};
  return by_id(gpu_claims_elsewhere(*dir, dlrun_home(env), inside_job_of(env)), keys);
}

GpuClaimsByGpu gpu_claims_elsewhere(const Environment& env) {
  if (!gpu_claims_dir(env)) return {};
  return gpu_claims_elsewhere(env, GpuKeys::here());
}

GpuClaims::GpuClaims(std::string dir, std::string home, std::string job, std::string inside_job, GpuKeys keys)
    : m_dir(std::move(dir)),
      m_home(std::move(home)),
      m_job(std::move(job)),
      m_inside_job(std::move(inside_job)),
      m_keys(std::move(keys)) {}

GpuClaims GpuClaims::for_job(const Environment& env, const std::string& job) {
  auto dir = gpu_claims_dir(env);
  return GpuClaims(dir.value_or(""), dlrun_home(env), job, inside_job_of(env), dir ? GpuKeys::here() : GpuKeys{});
}

GpuClaims::GpuClaims(GpuClaims&& other) noexcept
    : m_dir(std::move(other.m_dir)),
      m_home(std::move(other.m_home)),
      m_job(std::move(other.m_job)),
      m_inside_job(std::move(other.m_inside_job)),
      m_keys(std::move(other.m_keys)),
      m_claims(std::move(other.m_claims)),
      m_warned(other.m_warned) {
  other.m_claims.clear();
}

GpuClaims::~GpuClaims() {
  for (const auto& [gpu, claim] : m_claims) {
    ::unlink(claim.path.c_str());  // before the lock goes: no one sees it in place unlocked
    ::close(claim.fd);
  }
}

std::vector<GpuClaimHolder> GpuClaims::hold(const std::vector<std::string>& gpus) {
  std::vector<GpuClaimHolder> conflicts;
  if (m_dir.empty()) return conflicts;
  for (auto it = m_claims.begin(); it != m_claims.end();) {
    if (std::find(gpus.begin(), gpus.end(), it->first) != gpus.end()) {
      ++it;
      continue;
    }
    ::unlink(it->second.path.c_str());
    ::close(it->second.fd);  // the lock goes with it
    it = m_claims.erase(it);
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
  if (auto weakness = weakness_of(m_dir); !weakness.empty() && !m_warned) {
    log::warn("GPU claims: {}", weakness);
    m_warned = true;
  }
  const auto before = held_claims(m_dir);
  std::vector<std::string> claimed_now;
  for (const auto& gpu : gpus) {
    if (m_claims.count(gpu) || gpu.empty()) continue;
    const std::string key = m_keys.key(gpu);
    const bool inside = std::any_of(before.begin(), before.end(), [&](const GpuClaimHolder& holder) {
      return holder.gpu == key && of_job(holder, m_home, m_inside_job);
    });
    if (inside) continue;  // this run is inside the job that holds it, on that job's GPU
    const std::string path = m_dir + "/" + name_of(key);
    std::string problem;
    const int fd = place_locked_file(m_dir, path, fmt::format("job={}\nhome={}\n", m_job, m_home), problem);
    if (fd < 0) {
      warn(problem);
      continue;
    }
    m_claims[gpu] = {fd, path};
    claimed_now.push_back(gpu);
  }
  // Claimed first, looked at then: of two processes that claim a GPU at the same moment, the one
  // that looks last sees both claims, so at least one of them sees the other (gpu_claims.hpp).
  const auto after = claimed_now.empty() ? std::vector<GpuClaimHolder>{} : held_claims(m_dir);
  for (const auto& gpu : claimed_now) {
    const std::string key = m_keys.key(gpu);
    for (const auto& holder : after) {
      const bool own = holder.pid == ::getpid() && holder.uid == ::geteuid() && holder.job == m_job &&
                       holder.home == m_home;
      if (holder.gpu != key || own || of_job(holder, m_home, m_inside_job) || of_store(holder, m_home)) continue;
      conflicts.push_back(holder);
      conflicts.back().gpu = gpu;  // as this process numbers it
      break;
    }
  }
  return conflicts;
}

std::vector<std::string> GpuClaims::held() const {
  std::vector<std::string> gpus;
  for (const auto& [gpu, claim] : m_claims) gpus.push_back(gpu);
  return gpus;
}

GpuWant::GpuWant(const Environment& env, const std::string& job, int gpus) {
  const auto dir = gpu_claims_dir(env);
  if (!dir || gpus < 1 || !ensure_dir(*dir).empty()) return;  // no claims: no one to ask
  const std::string path = *dir + "/" + name_of(std::to_string(gpus), k_want_prefix);
  std::string problem;
  const int fd = place_locked_file(*dir, path,
                                   fmt::format("job={}\nhome={}\n", job, dlrun_home(env)), problem);
  if (fd < 0) {
    log::debug("GPU want not published: {}", problem);
    return;
  }
  m_fd = fd;
  m_path = path;
}

GpuWant::~GpuWant() {
  if (m_fd < 0) return;
  ::unlink(m_path.c_str());
  ::close(m_fd);
}

GpuWant::GpuWant(GpuWant&& other) noexcept : m_fd(std::exchange(other.m_fd, -1)), m_path(std::move(other.m_path)) {}

std::vector<GpuWantHolder> gpu_wants_elsewhere(const Environment& env) {
  std::vector<GpuWantHolder> wants;
  const auto dir = gpu_claims_dir(env);
  if (!dir) return wants;
  const std::string home = dlrun_home(env);
  for (auto& holder : held_claims(*dir, k_want_prefix)) {
    if (holder.home.empty() || of_store(holder, home)) continue;
    const auto gpus = whole_number<int>(holder.gpu);
    if (!gpus || *gpus < 1) continue;
    wants.push_back({*gpus, std::move(holder)});
  }
  std::sort(wants.begin(), wants.end(), [](const GpuWantHolder& a, const GpuWantHolder& b) {
    return std::tie(a.holder.since, a.holder.uid, a.holder.home, a.holder.job) <
           std::tie(b.holder.since, b.holder.uid, b.holder.home, b.holder.job);
  });
  return wants;
}

std::string sharing_warning(const std::vector<GpuClaimHolder>& conflicts) {
  std::vector<std::string> parts;
  for (const auto& holder : conflicts) parts.push_back(fmt::format("GPU {} is in use by {}", holder.gpu, describe(holder)));
  return fmt::format("{}: {}", fmt::join(parts, "; "),
                     conflicts.size() == 1 ? "the two jobs share it" : "the jobs share them");
}

}  // namespace dlrun::launcher
