#include "dlrun/launcher/gpu_claims.hpp"

#include <fcntl.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <string>

#include <doctest/doctest.h>

using namespace dlrun::launcher;
namespace fs = std::filesystem;

namespace {

// Two GpuClaims in one process stand for two supervisors: their open-file-description locks
// conflict as those of two processes do.
struct ClaimsDir {
  fs::path root;
  std::string dir;
  ClaimsDir() {
    std::string pattern = (fs::temp_directory_path() / "dlrun-claims-XXXXXX").string();
    root = ::mkdtemp(pattern.data());
    dir = (root / "claims").string();  // made by the first claim
  }
  ~ClaimsDir() { fs::remove_all(root); }
  // The claim files in place (hidden names aside), by name.
  std::vector<std::string> files() const {
    std::vector<std::string> names;
    if (!fs::exists(dir)) return names;
    for (const auto& entry : fs::directory_iterator(dir)) names.push_back(entry.path().filename().string());
    std::sort(names.begin(), names.end());
    return names;
  }
};

std::vector<std::string> gpus_of(const GpuClaimsByGpu& claims) {
  std::vector<std::string> gpus;
  for (const auto& [gpu, holder] : claims) gpus.push_back(gpu);
  return gpus;
}

std::string me() { return std::to_string(::geteuid()); }

}  // namespace

TEST_SUITE("launcher::GpuClaims") {
  TEST_CASE("a store sees the GPUs another store's job holds, with who holds them, until it lets go") {
    ClaimsDir claims_dir;
    CHECK(gpu_claims_elsewhere(claims_dir.dir, "/homes/b").empty());  // no directory yet: no claims
    {
      // Made with its missing parents, which every user can cross.
      GpuClaims deep(claims_dir.dir + "/x/y", "/homes/d", "1");
      CHECK(deep.hold({"0"}).empty());
      CHECK(deep.held() == std::vector<std::string>{"0"});
      struct stat parent {};
      REQUIRE(::stat((claims_dir.dir + "/x").c_str(), &parent) == 0);
      CHECK((parent.st_mode & 07777) == 0755);
    }
    fs::remove_all(claims_dir.dir);
    {
      GpuClaims a(claims_dir.dir, "/homes/a", "4");
      CHECK(a.hold({"0", "1"}).empty());
      CHECK(a.held() == std::vector<std::string>{"0", "1"});
      struct stat st {};
      REQUIRE(::stat(claims_dir.dir.c_str(), &st) == 0);
      CHECK((st.st_mode & 07777) == 01777);  // every user's claims live there, as in /tmp
      const auto files = claims_dir.files();
      REQUIRE(files.size() == 2);  // dlrun-gpu-ID.UID.PID.RANDOM, nothing hidden left behind
      CHECK(files[0].rfind("dlrun-gpu-0." + me() + "." + std::to_string(::getpid()) + ".", 0) == 0);
      REQUIRE(::stat((claims_dir.dir + "/" + files[0]).c_str(), &st) == 0);
      CHECK((st.st_mode & 07777) == 0644);  // its owner's alone to write, anyone's to read
      CHECK(st.st_uid == ::geteuid());

      auto seen = gpu_claims_elsewhere(claims_dir.dir, "/homes/b");
      CHECK(gpus_of(seen) == std::vector<std::string>{"0", "1"});
      CHECK(seen["1"][0].job == "4");
      CHECK(seen["1"][0].home == "/homes/a");
      CHECK(seen["1"][0].pid == ::getpid());
      CHECK(describe(seen["1"][0]) == "your dlrun job 4 of DLRUN_HOME=/homes/a (pid " + std::to_string(::getpid()) + ")");
      CHECK(gpu_claims_elsewhere(claims_dir.dir, "/homes/a/").empty());  // its own store knows its jobs

      // Another store's job given GPU 1 anyway shares it, is told with whom, and claims it too.
      GpuClaims b(claims_dir.dir, "/homes/b", "9");
      auto shared = b.hold({"1", "2"});
      REQUIRE(shared.size() == 1);
      CHECK(shared[0].gpu == "1");
      CHECK(sharing_warning(shared) == "GPU 1 is in use by your dlrun job 4 of DLRUN_HOME=/homes/a (pid " +
                                           std::to_string(::getpid()) + "): the two jobs share it");
      CHECK(b.held() == std::vector<std::string>{"1", "2"});
      CHECK(gpus_of(gpu_claims_elsewhere(claims_dir.dir, "/homes/a")) == std::vector<std::string>{"1", "2"});
      // Every holder of a shared GPU is named.
      auto both = gpu_claims_elsewhere(claims_dir.dir, "/homes/c");
      REQUIRE(both["1"].size() == 2);
      const std::string pid = std::to_string(::getpid());
      CHECK(describe(both["1"]) == "your dlrun job 4 of DLRUN_HOME=/homes/a (pid " + pid +
                                       ") and your dlrun job 9 of DLRUN_HOME=/homes/b (pid " + pid + ")");
      // A dlrun run agent's claim is no store's: every store counts it, its own user's too; a run
      // inside that job (DLRUN_JOB_ID) does not.
      GpuClaims agent(claims_dir.dir, "", "12");
      CHECK(agent.hold({"3"}).empty());
      auto run = gpu_claims_elsewhere(claims_dir.dir, "/homes/a");
      REQUIRE(run.count("3"));
      CHECK(describe(run["3"]) == "your dlrun run job 12 (pid " + pid + ")");
      CHECK(gpu_claims_elsewhere(claims_dir.dir, "/homes/a", "12").count("3") == 0);
      GpuClaims inside_run(claims_dir.dir, "/homes/a", "13", "12");
      CHECK(inside_run.hold({"3"}).empty());
      CHECK(inside_run.held().empty());
      agent.hold({});
      // Job 12 of another store is not the job 12 a run of this store is inside.
      GpuClaims other_twelve(claims_dir.dir, "/homes/z", "12");
      CHECK(other_twelve.hold({"5"}).empty());
      CHECK(gpu_claims_elsewhere(claims_dir.dir, "/homes/a", "12").count("5") == 1);
      GpuClaims inside_a_twelve(claims_dir.dir, "/homes/a", "14", "12");
      CHECK(inside_a_twelve.hold({"5"}).size() == 1);
      CHECK(inside_a_twelve.held() == std::vector<std::string>{"5"});
      // An agent asks no store: with no home, every claim counts, its own user's store's too.
      CHECK(gpu_claims_elsewhere(claims_dir.dir, "").count("0") == 1);
      other_twelve.hold({});
      inside_a_twelve.hold({});

      // A run inside job 4 on job 4's GPU neither claims it again nor is warned; any other job
      // of the same store claims it as well (job 4 may be ending: its claim goes a moment later).
      GpuClaims inner(claims_dir.dir, "/homes/a", "5", "4");
      CHECK(inner.hold({"0"}).empty());
      CHECK(inner.held().empty());
      GpuClaims next(claims_dir.dir, "/homes/a", "6");
      CHECK(next.hold({"0"}).empty());
      CHECK(next.held() == std::vector<std::string>{"0"});

      // Holding fewer releases the rest at once.
      b.hold({"2"});
      CHECK(gpus_of(gpu_claims_elsewhere(claims_dir.dir, "/homes/a")) == std::vector<std::string>{"2"});
    }
    CHECK(gpu_claims_elsewhere(claims_dir.dir, "/homes/b").empty());
    CHECK(claims_dir.files().empty());  // released: the files go with the claims
  }

  TEST_CASE("the claims of a process killed without cleanup go with it, and its files with its owner's next look") {
    ClaimsDir claims_dir;
    int ready[2], release[2];
    REQUIRE(::pipe(ready) == 0);
    REQUIRE(::pipe(release) == 0);
    const pid_t child = ::fork();
    REQUIRE(child >= 0);
    if (child == 0) {  // another store's job on GPUs 0 and 1, until told to end (abruptly)
      GpuClaims a(claims_dir.dir, "/homes/a", "4");
      a.hold({"0", "1"});
      char c = 'x';
      (void)!::write(ready[1], &c, 1);
      (void)!::read(release[0], &c, 1);
      ::_exit(0);  // no destructor: as a SIGKILL leaves it, the lock dropped, the files left
    }
    char c = 0;
    REQUIRE(::read(ready[0], &c, 1) == 1);
    auto seen = gpu_claims_elsewhere(claims_dir.dir, "/homes/b");
    CHECK(gpus_of(seen) == std::vector<std::string>{"0", "1"});
    CHECK(seen["0"][0].pid == child);
    c = 'x';
    REQUIRE(::write(release[1], &c, 1) == 1);
    int status = 0;
    REQUIRE(::waitpid(child, &status, 0) == child);
    CHECK(claims_dir.files().size() == 2);
    CHECK(gpu_claims_elsewhere(claims_dir.dir, "/homes/b").empty());
    CHECK(claims_dir.files().empty());  // unlocked files of this user's: removed on the way
    for (int fd : {ready[0], ready[1], release[0], release[1]}) ::close(fd);
  }

  TEST_CASE("a GPU id becomes a file name both ways, and only a regular file in its owner's name is a claim") {
    ClaimsDir claims_dir;
    GpuClaims a(claims_dir.dir, "/homes/a", "4");
    CHECK(a.hold({"MIG-GPU-8a1b/2/0", "a_b.c"}).empty());
    const auto files = claims_dir.files();
    REQUIRE(files.size() == 2);
    CHECK(files[0].rfind("dlrun-gpu-MIG-GPU-8a1b_2f2_2f0." + me() + ".", 0) == 0);
    CHECK(files[1].rfind("dlrun-gpu-a_5fb_2ec." + me() + ".", 0) == 0);
    CHECK(gpus_of(gpu_claims_elsewhere(claims_dir.dir, "/homes/b")) ==
          std::vector<std::string>{"MIG-GPU-8a1b/2/0", "a_b.c"});
    a.hold({});

    // Names that decode to a control character (for a terminal to obey), malformed names, a link.
    const std::string pid = std::to_string(::getpid());
    for (const std::string& name : {"dlrun-gpu-_1b_5b2J." + me() + "." + pid + ".x", "dlrun-gpu-1." + me() + "." + pid,
                                   "dlrun-gpu-1.-1." + pid + ".x", "dlrun-gpu-." + me() + "." + pid + ".x"}) {
      std::ofstream(claims_dir.dir + "/" + name) << "job=1\nhome=/homes/x\n";
      const int fd = ::open((claims_dir.dir + "/" + name).c_str(), O_RDWR);
      struct flock lock {};
      lock.l_type = F_WRLCK;
      lock.l_whence = SEEK_SET;
      REQUIRE(::fcntl(fd, F_OFD_SETLK, &lock) == 0);
      CHECK_MESSAGE(gpu_claims_elsewhere(claims_dir.dir, "/homes/b").empty(), name);
      ::close(fd);
      fs::remove(claims_dir.dir + "/" + name);
    }
    fs::create_symlink("/etc/passwd", claims_dir.dir + "/dlrun-gpu-5." + me() + "." + pid + ".x");
    CHECK(gpu_claims_elsewhere(claims_dir.dir, "/homes/b").empty());
    CHECK(fs::is_symlink(claims_dir.dir + "/dlrun-gpu-5." + me() + "." + pid + ".x"));

    if (::geteuid() == 0) {  // root can make what another user could
      // A locked file in user 65534's name that is not theirs: nobody claims in another's name.
      const std::string forged = claims_dir.dir + "/dlrun-gpu-7.65534.1.x";
      std::ofstream(forged) << "job=1\nhome=/homes/x\n";
      const int fd = ::open(forged.c_str(), O_RDWR);
      struct flock lock {};
      lock.l_type = F_WRLCK;
      lock.l_whence = SEEK_SET;
      REQUIRE(::fcntl(fd, F_OFD_SETLK, &lock) == 0);
      CHECK(gpu_claims_elsewhere(claims_dir.dir, "/homes/b").empty());
      // Theirs, it is a claim, and what it says is shown printable.
      REQUIRE(::fchown(fd, 65534, 65534) == 0);
      std::ofstream(forged) << "job=1\x1b[2J\nhome=/h\xc2\x9b\n";
      auto seen = gpu_claims_elsewhere(claims_dir.dir, "/homes/b");
      REQUIRE(gpus_of(seen) == std::vector<std::string>{"7"});
      CHECK(describe(seen["7"][0]).find("dlrun job 1?[2J (pid 1)") != std::string::npos);
      ::close(fd);
    }
  }

  TEST_CASE("two processes that number GPUs differently agree by their UUIDs") {
    ClaimsDir claims_dir;
    // One sees both GPUs; the other (a container, a Slurm cgroup) sees only the second, as its 0.
    const GpuKeys both{{"GPU-aa", "GPU-bb"}}, second{{"GPU-bb"}};
    CHECK(both.key("1") == "GPU-bb");
    CHECK(second.key("0") == "GPU-bb");
    CHECK(second.id("GPU-bb") == "0");
    CHECK(second.key("7") == "7");  // not one it knows: as it is
    CHECK(GpuKeys{}.key("0") == "0");
    GpuClaims a(claims_dir.dir, "/homes/a", "1", "", both);
    CHECK(a.hold({"0"}).empty());  // GPU-aa
    GpuClaims b(claims_dir.dir, "/homes/b", "2", "", second);
    CHECK(b.hold({"0"}).empty());  // GPU-bb: no conflict, though both say 0
    auto seen_by_a = by_id(gpu_claims_elsewhere(claims_dir.dir, "/homes/a"), both);
    CHECK(gpus_of(seen_by_a) == std::vector<std::string>{"1"});  // b's 0 is a's 1
    auto seen_by_b = by_id(gpu_claims_elsewhere(claims_dir.dir, "/homes/b"), second);
    CHECK(seen_by_b.empty());  // a's GPU-aa is not one b can see
    GpuClaims c(claims_dir.dir, "/homes/c", "3", "", both);
    auto shared = c.hold({"1"});
    REQUIRE(shared.size() == 1);
    CHECK(shared[0].gpu == "1");  // named as c numbers it
    CHECK(shared[0].job == "2");
  }

  TEST_CASE("where the claims live: DLRUN_GPU_CLAIMS_DIR, /dev/shm, or nowhere for pretend GPUs") {
    CHECK(gpu_claims_dir({}) == std::string("/dev/shm"));
    CHECK(gpu_claims_dir({{"DLRUN_GPU_CLAIMS_DIR", "/x"}}) == std::string("/x"));
    CHECK_FALSE(gpu_claims_dir({{"DLRUN_GPU_CLAIMS_DIR", ""}}));  // set empty: off
    CHECK_FALSE(gpu_claims_dir({{"DLRUN_FAKE_GPUS", "4"}}));
    CHECK_FALSE(gpu_claims_dir({{"SLURM_JOB_ID", "77"}}));  // Slurm gives each job its GPUs
    CHECK(gpu_claims_dir({{"SLURM_JOB_ID", "77"}, {"DLRUN_GPU_CLAIMS_DIR", "/x"}}) == std::string("/x"));
    CHECK(gpu_claims_dir({{"DLRUN_FAKE_GPUS", "4"}, {"DLRUN_GPU_CLAIMS_DIR", "/x"}}) == std::string("/x"));
    CHECK_FALSE(gpu_claims_dir({{"DLRUN_GPU_CLAIMS_DIR", "claims"}}));  // relative: off, with a warning
    GpuClaims off = GpuClaims::for_job({{"DLRUN_FAKE_GPUS", "4"}}, "1");
    CHECK(off.hold({"0"}).empty());
    CHECK(off.held().empty());
  }
}
