// `dlrun init DIR`: write a training-project skeleton.

#include <filesystem>
#include <fstream>
#include <iostream>
#include <memory>

#include <fmt/format.h>

#include "commands.hpp"
#include "dlrun/error.hpp"
#include "project_templates.hpp"

namespace fs = std::filesystem;

namespace dlrun::cli {
namespace {

struct InitArgs {
  std::string dir;
  bool force = false;
};

// Where this dlrun is installed (PREFIX/bin/dlrun → PREFIX), for the CMAKE_PREFIX_PATH hint.
std::string install_prefix() {
  std::error_code ec;
  fs::path exe = fs::read_symlink("/proc/self/exe", ec);
  if (ec) return "PREFIX";
  fs::path prefix = exe.parent_path().parent_path();
  return fs::exists(prefix / "lib" / "cmake" / "dlrun", ec) || fs::exists(prefix / "lib64" / "cmake" / "dlrun", ec)
             ? prefix.string()
             : std::string("PREFIX");
}

int run_init(const InitArgs& args) {
  fs::path dir(args.dir);
  std::error_code ec;
  if (fs::exists(dir, ec) && !fs::is_directory(dir, ec)) {
    throw ConfigError(fmt::format("{} exists and is not a directory", args.dir));
  }
  if (!args.force) {
    for (const auto& file : project_templates()) {
      if (fs::exists(dir / file.name, ec)) {
        throw ConfigError(fmt::format("{} already exists; nothing was written (--force overwrites)",
                                      (dir / file.name).string()));
      }
    }
  }
  fs::create_directories(dir, ec);
  if (ec) throw ConfigError(fmt::format("cannot create {}: {}", args.dir, ec.message()));
  for (const auto& file : project_templates()) {
    std::ofstream out(dir / file.name);
    out << file.text;
    if (!out) throw Error(fmt::format("cannot write {}", (dir / file.name).string()));
  }
  std::string prefix = install_prefix();
  std::cout << fmt::format(
      "Created {0}/ with CMakeLists.txt, train.cpp, job.toml and README.md. Next:\n"
      "  cmake -S {0} -B {0}/build -DCMAKE_PREFIX_PATH={1}\n"
      "  cmake --build {0}/build\n"
      "  dlrun local --nproc 2 {0}/build/train\n",
      args.dir, prefix);
  return 0;
}

}  // namespace

Command add_init_command(CLI::App& dlrun) {
  auto args = std::make_shared<InitArgs>();
  CLI::App* app = dlrun.add_subcommand(
      "init", "Write a training-project skeleton (CMake project on dlrun's runtime, train.cpp, job.toml)");
  app->add_option("DIR", args->dir, "The project directory (created if missing)")->required();
  app->add_flag("--force", args->force, "Overwrite the skeleton's files if they exist");
  return {app, [args](const Trailing&) { return run_init(*args); }};
}

}  // namespace dlrun::cli
