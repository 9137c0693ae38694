#include "dlrun/launcher/private_files.hpp"
#include "dlrun/launcher/run_dir.hpp"

#include <sys/stat.h>
#include <unistd.h>

#include <cstdio>
#include <filesystem>
#include <string>

#include <doctest/doctest.h>

using namespace dlrun::launcher;
namespace fs = std::filesystem;

namespace {

struct TempDir {
  fs::path root;
  TempDir() {
    std::string pattern = (fs::temp_directory_path() / "dlrun-home-XXXXXX").string();
    root = ::mkdtemp(pattern.data());
  }
  ~TempDir() { fs::remove_all(root); }
};

// What check_own_home() throws for `home`, or empty.
std::string refusal(const fs::path& home) {
  try {
    check_own_home(home.string());
  } catch (const ForeignHomeError& e) {
    return e.what();
  } catch (const dlrun::ConfigError& e) {
    return std::string("ConfigError: ") + e.what();
  }
  return {};
}

}  // namespace

TEST_SUITE("launcher::PrivateFiles") {
  TEST_CASE("the store is under HOME when HOME is a directory, elsewhere when it names none") {
    TempDir tmp;
    CHECK(dlrun_home({{"HOME", tmp.root.string()}}) == tmp.root.string() + "/.local/state/dlrun");
    // HOME=/nonexistent (nobody's, many services'): the run was refused for want of a run directory.
    const std::string none = (tmp.root / "nonexistent").string();
    CHECK(dlrun_home({{"HOME", none}}).rfind(none, 0) != 0);
    CHECK(dlrun_home({{"HOME", none}, {"DLRUN_HOME", "/x/store"}}) == "/x/store");
  }
  TEST_CASE("a store is its user's own: missing, a directory of theirs, or their link to one") {
    TempDir tmp;
    CHECK(refusal(tmp.root / "missing") == "");
    fs::create_directory(tmp.root / "mine");
    ::chmod((tmp.root / "mine").c_str(), 0755);  // an older dlrun's: tightened, not refused
    CHECK(refusal(tmp.root / "mine") == "");
    fs::create_directory_symlink(tmp.root / "mine", tmp.root / "link");
    CHECK(refusal(tmp.root / "link") == "");
    tighten_home((tmp.root / "mine").string());
    struct stat st {};
    REQUIRE(::stat((tmp.root / "mine").c_str(), &st) == 0);
    CHECK((st.st_mode & 07777) == 0700);
  }

  TEST_CASE("a store a group shares is refused: any member could make it run their command as this user") {
    TempDir tmp;
    const fs::path shared = tmp.root / "shared";
    fs::create_directory(shared);
    REQUIRE(::chmod(shared.c_str(), 02770) == 0);
    CHECK(refusal(shared).find("is shared by group") != std::string::npos);
    CHECK_THROWS_AS(tighten_home(shared.string()), ForeignHomeError);
    struct stat st {};
    REQUIRE(::stat(shared.c_str(), &st) == 0);
    CHECK((st.st_mode & 07777) == 02770);  // left as it was
    std::FILE* f = std::fopen((tmp.root / "file").c_str(), "w");
    REQUIRE(f);
    std::fclose(f);
    CHECK(refusal(tmp.root / "file").find("is not a directory") != std::string::npos);
  }

  TEST_CASE("a store others may write, or below a directory they may change, is refused, not made private") {
    TempDir tmp;
    const fs::path open = tmp.root / "open";
    fs::create_directory(open);
    REQUIRE(::chmod(open.c_str(), 0777) == 0);
    CHECK(refusal(open).find("may be written by every user") != std::string::npos);
    REQUIRE(::chmod(open.c_str(), 01777) == 0);  // /tmp itself: sticky, but a store for no one
    CHECK(refusal(open).find("may be written by every user") != std::string::npos);
    struct stat st {};
    REQUIRE(::stat(open.c_str(), &st) == 0);
    CHECK((st.st_mode & 07777) == 01777);  // left as it was
    // Below a directory every user may write and that is not sticky: another could rename the
    // store away and put theirs in its place between the check and its use.
    fs::create_directory(open / "home");
    REQUIRE(::chmod(open.c_str(), 0777) == 0);
    CHECK(refusal(open / "home").find("lies below a directory another user may change") != std::string::npos);
    REQUIRE(::chmod(open.c_str(), 01777) == 0);  // as /tmp: fine
    CHECK(refusal(open / "home") == "");
    // A jobs.db with a second name (a hard link another user kept) is not the user's alone.
    std::FILE* f = std::fopen((open / "home" / "jobs.db").c_str(), "w");
    REQUIRE(f);
    std::fclose(f);
    REQUIRE(::link((open / "home" / "jobs.db").c_str(), (tmp.root / "kept").c_str()) == 0);
    CHECK(refusal(open / "home").find("links to it") != std::string::npos);
  }

  TEST_CASE("another user's store, or a link another user made, is refused (as root)") {
    if (::geteuid() != 0) return;  // chown needs root
    TempDir tmp;
    const fs::path theirs = tmp.root / "theirs";
    fs::create_directory(theirs);
    REQUIRE(::chown(theirs.c_str(), 65534, 65534) == 0);
    CHECK(refusal(theirs).find("belongs to") != std::string::npos);
    CHECK(refusal(theirs).find("65534") != std::string::npos);
    // A link in /tmp that another user planted, to a directory of this user's.
    fs::create_directory(tmp.root / "mine");
    fs::create_directory_symlink(tmp.root / "mine", tmp.root / "planted");
    REQUIRE(::lchown((tmp.root / "planted").c_str(), 65534, 65534) == 0);
    CHECK(refusal(tmp.root / "planted").find("belongs to") != std::string::npos);
    // A jobs.db another user put in a store of this user's.
    std::FILE* f = std::fopen((tmp.root / "mine" / "jobs.db").c_str(), "w");
    REQUIRE(f);
    std::fclose(f);
    REQUIRE(::chown((tmp.root / "mine" / "jobs.db").c_str(), 65534, 65534) == 0);
    CHECK(refusal(tmp.root / "mine").find("it belongs to") != std::string::npos);
    // A run or log directory another user made (before the job did), or their link to one.
    CHECK_THROWS_WITH_AS(check_own_directory(theirs.string(), "log directory"),
                         doctest::Contains("log directory"), dlrun::ConfigError);
    CHECK_NOTHROW(check_own_directory((tmp.root / "mine").string(), "log directory"));
    CHECK_THROWS_AS(check_own_directory((tmp.root / "planted").string(), "--run-dir"), dlrun::ConfigError);
    // The path as written: a trailing slash, or another user's link on the way, is refused too.
    CHECK(refusal(tmp.root.string() + "/planted/").find("belongs to") != std::string::npos);
    fs::create_directory(tmp.root / "mine" / "store");
    fs::remove(tmp.root / "mine" / "jobs.db");
    CHECK(refusal(tmp.root / "mine" / "store") == "");
    CHECK(refusal(tmp.root / "planted" / "store").find("is a link of") != std::string::npos);
    // Not made in another user's directory: root with a user's HOME left root's directories there.
    CHECK(refusal(theirs / "x" / "store").find("would be made below a directory another user may change") !=
          std::string::npos);
  }

  TEST_CASE("a run or log directory below a directory others may change is refused, unless it is sticky") {
    TempDir tmp;
    const fs::path open = tmp.root / "open";
    fs::create_directories(open / "run");
    REQUIRE(::chmod(open.c_str(), 0777) == 0);
    CHECK_THROWS_WITH_AS(check_own_directory((open / "run").string(), "--run-dir"),
                         doctest::Contains("lies below a directory another user may change"), dlrun::ConfigError);
    REQUIRE(::chmod(open.c_str(), 01777) == 0);
    CHECK_NOTHROW(check_own_directory((open / "run").string(), "--run-dir"));
  }
}
