#include "remove_tree.hpp"

#include <unistd.h>

#include <fstream>

// Last, in a block of its own: after every LibTorch header (glog's CHECK).
#include "doctest_after_torch.hpp"

namespace fs = std::filesystem;
using dlrun::runtime::remove_tree;

TEST_SUITE("runtime::RemoveTree") {
  TEST_CASE("a nested tree goes, a link in it goes without what it points to") {
    const fs::path base = fs::temp_directory_path() / ("dlrun-rmtree-" + std::to_string(::getpid()));
    const fs::path keep = base.string() + "-keep";
    fs::create_directories(base / "a" / "b");
    fs::create_directories(keep);
    std::ofstream(base / "a" / "b" / "f.pt") << "x";
    std::ofstream(base / "top.txt") << "y";
    std::ofstream(keep / "kept.txt") << "z";
    fs::create_directory_symlink(keep, base / "a" / "link");
    remove_tree(base);
    CHECK_FALSE(fs::exists(base));
    CHECK(fs::exists(keep / "kept.txt"));
    std::error_code ec;
    remove_tree(keep, ec);
    CHECK_FALSE(ec);
    CHECK_FALSE(fs::exists(keep));
  }

  TEST_CASE("a missing path is not an error, a plain file goes") {
    const fs::path file = fs::temp_directory_path() / ("dlrun-rmfile-" + std::to_string(::getpid()));
    std::error_code ec;
    remove_tree(file, ec);
    CHECK_FALSE(ec);
    std::ofstream(file) << "x";
    remove_tree(file);
    CHECK_FALSE(fs::exists(file));
  }

  TEST_CASE("what cannot be removed is reported" * doctest::skip(::geteuid() == 0)) {
    // (root may delete anything, so this runs as an ordinary user only)
    const fs::path base = fs::temp_directory_path() / ("dlrun-rmro-" + std::to_string(::getpid()));
    fs::create_directories(base / "locked");
    std::ofstream(base / "locked" / "f") << "x";
    fs::permissions(base / "locked", fs::perms::owner_read | fs::perms::owner_exec);
    std::error_code ec;
    remove_tree(base, ec);
    CHECK(ec);
    fs::permissions(base / "locked", fs::perms::owner_all);
    remove_tree(base);
  }
}
