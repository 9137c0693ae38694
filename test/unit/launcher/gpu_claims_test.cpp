#include "dlrun/launcher/gpu_claims.hpp"

#include <sys/stat.h>
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
      REQUIRE(::stat((claims_dir.dir + "/gpu-0").c_str(), &st) == 0);
      CHECK((st.st_mode & 07777) == 0666);  // another user may claim GPU 0 once this job ends

      auto seen = gpu_claims_elsewhere(claims_dir.dir, "/homes/b");
      CHECK(gpus_of(seen) == std::vector<std::string>{"0", "1"});
      CHECK(seen["1"].job == "4");
      CHECK(seen["1"].home == "/homes/a");
      CHECK(seen["1"].pid == ::getpid());
      CHECK(describe(seen["1"]) == "your dlrun job 4 of DLRUN_HOME=/homes/a (pid " + std::to_string(::getpid()) + ")");
      // Its own store knows its jobs' GPUs: they are not "elsewhere" for it.
      CHECK(gpu_claims_elsewhere(claims_dir.dir, "/homes/a/").empty());

      // Another store's job given GPU 1 anyway shares it, and is told with whom.
      GpuClaims b(claims_dir.dir, "/homes/b", "9");
      auto shared = b.hold({"1", "2"});
      REQUIRE(shared.size() == 1);
      CHECK(shared[0].gpu == "1");
      CHECK(shared[0].job == "4");
      CHECK(sharing_warning(shared).find("GPU 1 is in use by your dlrun job 4 of DLRUN_HOME=/homes/a") == 0);
      CHECK(b.held() == std::vector<std::string>{"2"});
      CHECK(gpus_of(gpu_claims_elsewhere(claims_dir.dir, "/homes/a")) == std::vector<std::string>{"2"});

      // A run inside job 4 (the same store) on job 4's GPU: neither a conflict nor a claim.
      GpuClaims inner(claims_dir.dir, "/homes/a", "5");
      CHECK(inner.hold({"0"}).empty());
      CHECK(inner.held().empty());

      // Holding fewer releases the rest at once.
      a.hold({"0"});
      CHECK(gpus_of(gpu_claims_elsewhere(claims_dir.dir, "/homes/b")) == std::vector<std::string>{"0"});
    }
    // Gone with their holders (the kernel drops a lock when its process ends, however it ends).
    CHECK(gpu_claims_elsewhere(claims_dir.dir, "/homes/b").empty());
    GpuClaims c(claims_dir.dir, "/homes/c", "1");
    CHECK(c.hold({"0", "1", "2"}).empty());
    CHECK(c.held().size() == 3);
  }

  TEST_CASE("a GPU's UUID is a file name, and a stray file or link in the directory is no claim") {
    ClaimsDir claims_dir;
    GpuClaims a(claims_dir.dir, "/homes/a", "4");
    CHECK(a.hold({"GPU-8a1b/2"}).empty());
    CHECK(fs::exists(claims_dir.dir + "/gpu-GPU-8a1b_2"));
    CHECK(gpu_claims_elsewhere(claims_dir.dir, "/homes/b").begin()->first == "GPU-8a1b/2");  // as the holder named it
    std::ofstream(claims_dir.dir + "/gpu-3") << "gpu=3\npid=1\n";  // not locked: nobody holds it
    fs::create_symlink("/etc/passwd", claims_dir.dir + "/gpu-5");
    CHECK(gpus_of(gpu_claims_elsewhere(claims_dir.dir, "/homes/b")) == std::vector<std::string>{"GPU-8a1b/2"});
    // A claim file that is a link is not followed: the GPU goes unclaimed, with a warning.
    GpuClaims b(claims_dir.dir, "/homes/b", "1");
    CHECK(b.hold({"5", "3"}).empty());
    CHECK(b.held() == std::vector<std::string>{"3"});
  }

  TEST_CASE("where the claims live: DLRUN_GPU_CLAIMS_DIR, /dev/shm, or nowhere for pretend GPUs") {
    CHECK(gpu_claims_dir({}) == std::string(k_default_gpu_claims_dir));
    CHECK(gpu_claims_dir({{"DLRUN_GPU_CLAIMS_DIR", "/x"}}) == std::string("/x"));
    CHECK_FALSE(gpu_claims_dir({{"DLRUN_GPU_CLAIMS_DIR", ""}}));  // set empty: off
    CHECK_FALSE(gpu_claims_dir({{"DLRUN_FAKE_GPUS", "4"}}));
    CHECK(gpu_claims_dir({{"DLRUN_FAKE_GPUS", "4"}, {"DLRUN_GPU_CLAIMS_DIR", "/x"}}) == std::string("/x"));
    GpuClaims off = GpuClaims::for_job({{"DLRUN_FAKE_GPUS", "4"}}, "1");
    CHECK(off.hold({"0"}).empty());
    CHECK(off.held().empty());
  }
}
