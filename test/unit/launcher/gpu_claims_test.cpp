#include "dlrun/launcher/gpu_claims.hpp"

#include <fcntl.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

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
};

std::vector<std::string> gpus_of(const std::map<std::string, GpuClaimHolder>& claims) {
  std::vector<std::string> gpus;
  for (const auto& [gpu, holder] : claims) gpus.push_back(gpu);
  return gpus;
}

}  // namespace

std::string own_file(const std::string& dir, const std::string& gpu) {
  return dir + "/dlrun-gpu-" + gpu + "." + std::to_string(::geteuid()) + "." + std::to_string(::getpid());
}

TEST_SUITE("launcher::GpuClaims") {
  TEST_CASE("a store sees the GPUs another store's job holds, with who holds them, until it lets go") {
    ClaimsDir claims_dir;
    CHECK(gpu_claims_elsewhere(claims_dir.dir, "/homes/b").empty());  // no directory yet: no claims
    {
      GpuClaims a(claims_dir.dir, "/homes/a", "4");
      CHECK(a.hold({"0", "1"}).empty());
      CHECK(a.held() == std::vector<std::string>{"0", "1"});
      struct stat st {};
      REQUIRE(::stat(claims_dir.dir.c_str(), &st) == 0);
      CHECK((st.st_mode & 07777) == 01777);  // every user's claims live there, as in /tmp
      REQUIRE(::stat(own_file(claims_dir.dir, "0").c_str(), &st) == 0);
      CHECK((st.st_mode & 07777) == 0644);  // its owner's alone to write, anyone's to read
      CHECK(st.st_uid == ::geteuid());

      // Seen from this process, a's claims are another process's: what a store elsewhere sees.
      auto seen = gpu_claims_elsewhere(claims_dir.dir, "/homes/b");
      CHECK(gpus_of(seen) == std::vector<std::string>{});  // this process's own files are skipped
      GpuClaims b(claims_dir.dir, "/homes/b", "9");
      CHECK(b.hold({"2"}).empty());
    }
    CHECK(gpu_claims_elsewhere(claims_dir.dir, "/homes/b").empty());
    CHECK(fs::is_empty(claims_dir.dir));  // released: the files go with the claims
  }

  TEST_CASE("claims of another process: seen, shared with a warning, gone with it however it ends") {
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
    CHECK(seen["1"].job == "4");
    CHECK(seen["1"].home == "/homes/a");
    CHECK(seen["1"].pid == child);
    CHECK(describe(seen["1"]) == "your dlrun job 4 of DLRUN_HOME=/homes/a (pid " + std::to_string(child) + ")");
    CHECK(gpu_claims_elsewhere(claims_dir.dir, "/homes/a/").empty());  // its own store knows its jobs

    // Another store's job given GPU 1 anyway shares it, is told with whom, and claims it too.
    GpuClaims b(claims_dir.dir, "/homes/b", "9");
    auto shared = b.hold({"1", "2"});
    REQUIRE(shared.size() == 1);
    CHECK(shared[0].gpu == "1");
    CHECK(shared[0].job == "4");
    CHECK(sharing_warning(shared) == "GPU 1 is in use by your dlrun job 4 of DLRUN_HOME=/homes/a (pid " +
                                         std::to_string(child) + "): the two jobs share it");
    CHECK(b.held() == std::vector<std::string>{"1", "2"});

    // A run inside job 4 (the same store) on job 4's GPU: neither a conflict nor a claim.
    GpuClaims inner(claims_dir.dir, "/homes/a", "5");
    CHECK(inner.hold({"0"}).empty());
    CHECK(inner.held().empty());

    c = 'x';
    REQUIRE(::write(release[1], &c, 1) == 1);
    int status = 0;
    REQUIRE(::waitpid(child, &status, 0) == child);
    CHECK(gpu_claims_elsewhere(claims_dir.dir, "/homes/b").empty());
    // Its files stay until their owner's next look (this user's, here) removes them.
    CHECK(!fs::exists(claims_dir.dir + "/dlrun-gpu-0." + std::to_string(::geteuid()) + "." + std::to_string(child)));
    for (int fd : {ready[0], ready[1], release[0], release[1]}) ::close(fd);
  }

  TEST_CASE("a GPU id becomes a file name both ways, and a link or a file not its name's user's is no claim") {
    ClaimsDir claims_dir;
    GpuClaims a(claims_dir.dir, "/homes/a", "4");
    CHECK(a.hold({"MIG-GPU-8a1b/2/0", "a_b"}).empty());
    CHECK(fs::exists(own_file(claims_dir.dir, "MIG-GPU-8a1b_2f2_2f0")));
    CHECK(fs::exists(own_file(claims_dir.dir, "a_5fb")));
    CHECK(a.held() == std::vector<std::string>{"MIG-GPU-8a1b/2/0", "a_b"});
    // A name already taken by a link is never followed: this user's own (left by an earlier
    // process with this pid) is replaced, another user's stays, and that GPU goes unclaimed.
    const auto passwd = fs::file_size("/etc/passwd");
    fs::create_symlink("/etc/passwd", own_file(claims_dir.dir, "5"));
    CHECK(a.hold({"5"}).empty());
    CHECK(a.held() == std::vector<std::string>{"5"});
    CHECK(!fs::is_symlink(own_file(claims_dir.dir, "5")));
    CHECK(fs::file_size("/etc/passwd") == passwd);
    if (::geteuid() == 0) {  // root can plant what another user would
      fs::create_symlink("/etc/passwd", own_file(claims_dir.dir, "6"));
      REQUIRE(::lchown(own_file(claims_dir.dir, "6").c_str(), 65534, 65534) == 0);
      CHECK(a.hold({"5", "6"}).empty());
      CHECK(a.held() == std::vector<std::string>{"5"});
      CHECK(fs::is_symlink(own_file(claims_dir.dir, "6")));
      CHECK(fs::file_size("/etc/passwd") == passwd);
      // A locked file in another user's name but not owned by them is no claim: nobody can
      // claim a GPU in another's name.
      const std::string forged = claims_dir.dir + "/dlrun-gpu-7.65534.1";
      std::ofstream(forged) << "job=1\nhome=/homes/x\n";
      const int fd = ::open(forged.c_str(), O_RDWR);
      struct flock lock {};
      lock.l_type = F_WRLCK;
      lock.l_whence = SEEK_SET;
      REQUIRE(::fcntl(fd, F_OFD_SETLK, &lock) == 0);
      GpuClaims b(claims_dir.dir, "/homes/b", "1");
      CHECK(b.hold({"7"}).empty());
      CHECK(gpus_of(gpu_claims_elsewhere(claims_dir.dir, "/homes/c")) == std::vector<std::string>{});
      ::close(fd);
    }
  }

  TEST_CASE("where the claims live: DLRUN_GPU_CLAIMS_DIR, /dev/shm, or nowhere for pretend GPUs") {
    CHECK(gpu_claims_dir({}) == std::string("/dev/shm"));
    CHECK(gpu_claims_dir({{"DLRUN_GPU_CLAIMS_DIR", "/x"}}) == std::string("/x"));
    CHECK_FALSE(gpu_claims_dir({{"DLRUN_GPU_CLAIMS_DIR", ""}}));  // set empty: off
    CHECK_FALSE(gpu_claims_dir({{"DLRUN_FAKE_GPUS", "4"}}));
    CHECK(gpu_claims_dir({{"DLRUN_FAKE_GPUS", "4"}, {"DLRUN_GPU_CLAIMS_DIR", "/x"}}) == std::string("/x"));
    GpuClaims off = GpuClaims::for_job({{"DLRUN_FAKE_GPUS", "4"}}, "1");
    CHECK(off.hold({"0"}).empty());
    CHECK(off.held().empty());
  }
}
