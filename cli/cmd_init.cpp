// `dlrun init [--python] DIR`: write a training-project skeleton (C++ or Python).

#include <fmt/format.h>

#include <filesystem>
#include <fstream>
#include <iostream>
#include <memory>

#include "commands.hpp"
#include "dlrun/launcher/ssh.hpp"
#include "dlrun/error.hpp"
#include "project_templates.hpp"

namespace fs = std::filesystem;

namespace dlrun::cli {
namespace {

struct InitArgs {
  std::string dir;
  bool force = false;
  bool python = false;
};

// The directory above this dlrun's bin/ (or its build tree's cli/); empty if unknown.
fs::path own_prefix() {
  std::error_code ec;
  fs::path exe = fs::read_symlink("/proc/self/exe", ec);
  return ec ? fs::path() : exe.parent_path().parent_path();
}

// Where find_package(dlrun) finds this dlrun's runtime, for CMAKE_PREFIX_PATH: its install
// prefix (PREFIX/bin/dlrun → PREFIX), or BUILD/runtime when it runs from its build tree
// (BUILD/cli/dlrun); empty when neither holds a dlrunConfig.cmake.
std::string package_prefix() {
  std::error_code ec;
  const fs::path prefix = own_prefix();
  if (prefix.empty()) return {};
  for (const char* lib : {"lib", "lib64"}) {
    if (fs::exists(prefix / lib / "cmake" / "dlrun" / "dlrunConfig.cmake", ec))
      return prefix.string();
  }
  if (fs::exists(prefix / "runtime" / "dlrunConfig.cmake", ec))
    return (prefix / "runtime").string();
  return {};
}

// Where Python finds this dlrun's package, when python3 would not by itself: BUILD/python
// when it runs from its build tree, PREFIX/lib*/python3.*/dist-packages when installed under
// a prefix other than /usr and /usr/local (which Debian's python3 searches); empty otherwise.
std::string python_path() {
  std::error_code ec;
  const fs::path prefix = own_prefix();
  if (prefix.empty()) return {};
  if (fs::exists(prefix / "python" / "dlrun" / "__init__.py", ec))
    return (prefix / "python").string();
  if (prefix == "/usr" || prefix == "/usr/local") return {};
  for (const char* lib : {"lib", "lib64"}) {
    for (const auto& entry : fs::directory_iterator(prefix / lib, ec)) {
      const fs::path packages = entry.path() / "dist-packages";
      if (entry.path().filename().string().rfind("python3", 0) == 0 &&
          fs::exists(packages / "dlrun" / "__init__.py", ec)) {
        return packages.string();
      }
    }
  }
  return {};
}

// The skeleton's text with DLRUN_PREFIX replaced by where the package is, if known.
std::string with_prefix(std::string text, const std::string& prefix) {
  if (prefix.empty()) return text;
  // It stands in shell commands (`cmake ... -DCMAKE_PREFIX_PATH=DLRUN_PREFIX`): quoted where a
  // path holds a space or other characters a shell would split or expand.
  const std::string quoted = launcher::shell_quote(prefix);
  const std::string placeholder = "DLRUN_PREFIX";
  for (size_t at = text.find(placeholder); at != std::string::npos;
       at = text.find(placeholder, at + quoted.size())) {
    text.replace(at, placeholder.size(), quoted);
  }
  return text;
}

int run_init(const InitArgs& args) {
  const auto& templates = args.python ? python_templates() : project_templates();
  fs::path dir(args.dir);
  std::error_code ec;
  if (fs::exists(dir, ec) && !fs::is_directory(dir, ec)) {
    throw ConfigError(fmt::format("{} exists and is not a directory", args.dir));
  }
  if (!args.force) {
    for (const auto& file : templates) {
      if (fs::exists(dir / file.name, ec)) {
        throw ConfigError(fmt::format("{} already exists; nothing was written (--force overwrites)",
                                      (dir / file.name).string()));
      }
    }
  }
  fs::create_directories(dir, ec);
  if (ec) throw ConfigError(fmt::format("cannot create {}: {}", args.dir, ec.message()));
  const std::string prefix = package_prefix();
  const std::string pythonpath = args.python ? python_path() : std::string();
  for (const auto& file : templates) {
    std::string text = with_prefix(file.text, prefix);
    // The Python job file carries the PYTHONPATH this dlrun's package needs, if any.
    const std::string commented = "# PYTHONPATH = \"DLRUN_PYTHONPATH\"";
    if (const auto at = text.find(commented); at != std::string::npos && !pythonpath.empty()) {
      text.replace(at, commented.size(), "PYTHONPATH = \"" + pythonpath + "\"");
    }
    std::ofstream out(dir / file.name);
    out << text;
    if (!out) throw Error(fmt::format("cannot write {}", (dir / file.name).string()));
  }
  if (args.python) {
    std::cout << fmt::format(
        "Created {0}/ with train.py, job.toml and README.md. Next:\n  {1}dlrun local --nproc 2 "
        "python3 {2}\n  dlrun submit {3}\n",
        args.dir, pythonpath.empty() ? "" : launcher::shell_quote("PYTHONPATH=" + pythonpath) + " ",
        launcher::shell_quote(args.dir + "/train.py"), launcher::shell_quote(args.dir + "/job.toml"));
    if (!pythonpath.empty()) {
      std::cout << "PYTHONPATH: where this dlrun's Python package is (docs/python.md); job.toml "
                   "sets it in [env].\n";
    }
    return 0;
  }
  using launcher::shell_quote;
  std::cout << fmt::format(
      "Created {0}/ with CMakeLists.txt, train.cpp, job.toml and README.md. Next:\n"
      "  cmake -S {1} -B {2} {3}\n"
      "  cmake --build {2}\n"
      "  dlrun local --nproc 2 {4}\n",
      args.dir, shell_quote(args.dir), shell_quote(args.dir + "/build"),
      shell_quote("-DCMAKE_PREFIX_PATH=" + (prefix.empty() ? std::string("DLRUN_PREFIX") : prefix)),
      shell_quote(args.dir + "/build/train"));
  if (prefix.empty()) {
    std::cout << "DLRUN_PREFIX: where dlrun is installed (cmake --install BUILD --prefix DIR), or "
                 "BUILD/runtime "
                 "of a build tree: this dlrun runs from neither.\n";
  }
  return 0;
}

}  // namespace

Command add_init_command(CLI::App& dlrun) {
  auto args = std::make_shared<InitArgs>();
  CLI::App* app = dlrun.add_subcommand("init",
                                       "Write a training-project skeleton (CMake project on "
                                       "dlrun's runtime, train.cpp, job.toml; with "
                                       "--python: train.py on import dlrun, job.toml)");
  app->add_option("DIR", args->dir, "The project directory (created if missing)")->required();
  app->add_flag("--python", args->python,
                "A Python project: train.py with import dlrun (docs/python.md)");
  app->add_flag("--force", args->force, "Overwrite the skeleton's files if they exist");
  app->footer("Exit codes: 0 the skeleton is written; 2 a file of it exists already (--force overwrites), or DIR "
              "is not a directory or cannot be created; 70 a file cannot be written (docs/exit-codes.md).");
  return {app, [args](const Trailing&) { return run_init(*args); }};
}

}  // namespace dlrun::cli
