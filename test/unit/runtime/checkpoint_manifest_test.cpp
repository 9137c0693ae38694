#include "checkpoint_manifest.hpp"
#include "remove_tree.hpp"

#include <doctest/doctest.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>

namespace fs = std::filesystem;
namespace manifest = dlrun::runtime::manifest;

namespace {

struct TempDir {
  fs::path path;
  TempDir() {
    path = fs::temp_directory_path() /
           ("dlrun-manifest-" + std::to_string(::getpid()) + "-" + std::to_string(std::rand()));
    fs::create_directories(path);
  }
  ~TempDir() {
    std::error_code ignored;
    dlrun::runtime::remove_tree(path, ignored);
  }
};

void write_file(const fs::path& path, const std::string& text) {
  std::ofstream(path, std::ios::binary) << text;
}

}  // namespace

TEST_SUITE("runtime::manifest") {
  TEST_CASE("a written manifest verifies, and any change to a file is caught") {
    TempDir dir;
    write_file(dir.path / "a.pt", "weights");
    write_file(dir.path / "state.txt", "step 3\n");
    manifest::write(dir.path, {"a.pt", "state.txt"});
    CHECK_FALSE(manifest::verify(dir.path).has_value());

    write_file(dir.path / "a.pt", "weightz");
    CHECK(manifest::verify(dir.path).value() == "a.pt does not match its CRC-32 in the MANIFEST");
    write_file(dir.path / "a.pt", "weight");
    CHECK(manifest::verify(dir.path).value() == "a.pt has 6 bytes, the MANIFEST says 7");
    fs::remove(dir.path / "a.pt");
    CHECK(manifest::verify(dir.path).value() == "a.pt is missing");
  }

  TEST_CASE("a missing or cut manifest is refused") {
    TempDir dir;
    CHECK(manifest::verify(dir.path).value() == "it has no MANIFEST (an interrupted save?)");
    write_file(dir.path / "x", "1");
    manifest::write(dir.path, {"x"});
    std::string text;
    {
      std::ifstream in(dir.path / manifest::k_file_name);
      text.assign(std::istreambuf_iterator<char>(in), {});
    }
    write_file(dir.path / manifest::k_file_name, text.substr(0, text.size() - 5));
    CHECK(manifest::verify(dir.path).has_value());
    text[0] = 'D';
    write_file(dir.path / manifest::k_file_name, text);
    CHECK(manifest::verify(dir.path).value() == "its MANIFEST does not match its own checksum");
  }
}
