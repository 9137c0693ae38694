#include "dlrun/launcher/command_resolution.hpp"

#include <doctest/doctest.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>

#include "dlrun/error.hpp"

using namespace dlrun::launcher;
namespace fs = std::filesystem;

namespace {

// A scratch directory with a bin/ holding an executable python3, removed at the end.
struct Scratch {
  fs::path dir;
  Scratch() {
    std::string pattern = (fs::temp_directory_path() / "dlrun-resolve-XXXXXX").string();
    dir = ::mkdtemp(pattern.data());
    fs::create_directories(dir / "bin");
    write("bin/python3", "#!/bin/sh\n", 0755);
  }
  ~Scratch() {
    std::error_code ec;
    fs::remove_all(dir, ec);
  }
  void write(const std::string& name, const std::string& text, mode_t mode = 0644) const {
    std::ofstream(dir / name) << text;
    ::chmod((dir / name).c_str(), mode);
  }
  std::string path() const { return (dir / "bin").string(); }
  std::string work() const { return dir.string(); }
};

}  // namespace

TEST_SUITE("launcher::CommandResolution") {
  TEST_CASE("a name ending in .py is a Python script") {
    CHECK(is_python_script("train.py"));
    CHECK(is_python_script("./a/b.py"));
    CHECK_FALSE(is_python_script("train"));
    CHECK_FALSE(is_python_script("python3"));
    CHECK_FALSE(is_python_script(".py"));
    CHECK_FALSE(is_python_script("train.pyc"));
  }
  TEST_CASE("the program shown is the script an interpreter runs, or the module") {
    using V = std::vector<std::string>;
    CHECK(shown_program(V{"/usr/bin/python3", "-u", "ddp.py", "--lr", "1"}).word == "ddp.py");
    CHECK(shown_program(V{"python3.11", "-X", "dev", "-W", "ignore", "train.py"}).word == "train.py");
    CHECK(shown_program(V{"bash", "-e", "-o", "pipefail", "run.sh"}).word == "run.sh");
    CHECK(shown_program(V{"/usr/bin/env", "python3", "train.py"}).word == "train.py");
    CHECK(shown_program(V{"env", "A=1", "B=2", "./train", "--lr", "1"}).word == "./train");
    CHECK(shown_program(V{"env", "-i", "./train"}).word == "env");  // env's own options: left as they are
    CHECK(shown_program(V{"env"}).word == "env");
    CHECK(shown_program(V{"sh", "-c", "exit 3"}).word == "sh");
    CHECK(shown_program(V{"python3"}).word == "python3");
    CHECK(shown_program(V{"./train", "x.py"}).word == "./train");
    CHECK(shown_program(V{"pythonista", "x.py"}).word == "pythonista");
    const ShownProgram module = shown_program(V{"python3", "-m", "pkg.train", "--epochs", "2"});
    CHECK(module.module);
    CHECK(module.word == "pkg.train");
    CHECK(module.interpreter == "python3");
    CHECK_FALSE(shown_program(V{"bash", "-m", "x"}).module);  // -m is Python's only
  }
  TEST_CASE("-m MODULE runs python3 -m MODULE with the arguments after it") {
    CHECK(python_module_command({"pkg.train", "--lr", "1"}) ==
          std::vector<std::string>{"python3", "-m", "pkg.train", "--lr", "1"});
    CHECK_THROWS_WITH_AS(python_module_command({}), doctest::Contains("-m: no module given"),
                         dlrun::ConfigError);
  }
  TEST_CASE("a script runs with python3 from PATH, with its arguments") {
    Scratch s;
    s.write("train.py", "print(1)\n");
    auto program = resolve_command({"train.py", "--lr", "1"}, s.path(), s.work());
    CHECK(program.path == s.path() + "/python3");
    CHECK(program.argv == std::vector<std::string>{"python3", "train.py", "--lr", "1"});
    // Executable without a #! line: still python3's.
    s.write("exec.py", "print(1)\n", 0755);
    CHECK(resolve_command({"./exec.py"}, s.path(), s.work()).argv ==
          std::vector<std::string>{"python3", "./exec.py"});
  }
  TEST_CASE("a .py script runs with python3 whatever its #! line names, as under torchrun") {
    Scratch s;
    s.write("own.py", "#!/opt/gone/bin/python\nprint(1)\n", 0755);
    auto program = resolve_command({"own.py", "x"}, s.path(), s.work());
    CHECK(program.path == s.path() + "/python3");
    CHECK(program.argv == std::vector<std::string>{"python3", "own.py", "x"});
  }
  TEST_CASE("a Python script without .py and without a #! line is told to run with python3") {
    Scratch s;
    s.write("train", "# a model\nimport torch\nprint(1)\n", 0755);
    CHECK_THROWS_WITH_AS(resolve_command({"./train"}, s.path(), s.work()),
                         doctest::Contains("reads as a Python script, but its name does not end in .py and it has no "
                                           "#! line, so exec cannot start it: put the interpreter before it (python3 "),
                         dlrun::ConfigError);
    // Not executable either: the same hint at once (chmod +x was suggested first, which would not do).
    s.write("eval", "def main():\n    pass\n", 0644);
    CHECK_THROWS_WITH_AS(resolve_command({"./eval"}, s.path(), s.work()),
                         doctest::Contains("program './eval' reads as a Python script"), dlrun::ConfigError);
  }
  TEST_CASE("a script not in the working directory is looked for in PATH") {
    Scratch s;
    s.write("bin/tool.py", "print(1)\n", 0755);
    auto program = resolve_command({"tool.py"}, s.path(), s.work());
    CHECK(program.argv == std::vector<std::string>{"python3", s.path() + "/tool.py"});
  }
  TEST_CASE("a text file without a #! line is refused before it starts, a binary is left to exec") {
    Scratch s;
    s.write("run.sh", "echo hi\n", 0755);
    CHECK_THROWS_WITH_AS(resolve_command({"./run.sh"}, s.path(), s.work()),
                         ("program '" + s.work() + "/run.sh' is a script without a #! line, which exec cannot "
                          "start: begin it with one such as #!/bin/sh, or put the interpreter before it (sh " +
                          s.work() + "/run.sh)").c_str(),
                         dlrun::ConfigError);
    s.write("bin/tool", "echo hi\n", 0755);  // found in PATH
    CHECK_THROWS_WITH_AS(resolve_command({"tool"}, s.path(), s.work()),
                         doctest::Contains("program 'tool' is a script without a #! line"), dlrun::ConfigError);
    s.write("ok.sh", "#!/bin/sh\necho hi\n", 0755);
    CHECK(resolve_command({"./ok.sh"}, s.path(), s.work()).path == "./ok.sh");
    s.write("blob", std::string("\x7f" "ELF\x02\x01", 6), 0755);  // exec decides
    CHECK(resolve_command({"./blob"}, s.path(), s.work()).path == "./blob");
    s.write("bin/tool.py", "print(1)\n", 0755);  // a Python script needs no #! line: python3 runs it
    CHECK(resolve_command({"tool.py"}, s.path(), s.work()).argv.front() == "python3");
  }
  TEST_CASE("missing scripts and interpreters are named") {
    Scratch s;
    CHECK_THROWS_WITH_AS(
        resolve_command({"nope.py"}, s.path(), s.work()),
        ("Python script 'nope.py' not found in " + s.work() + " nor in PATH").c_str(),
        dlrun::ConfigError);
    CHECK_THROWS_WITH_AS(resolve_command({"./sub/nope.py"}, s.path(), s.work()),
                         ("program '" + s.work() + "/sub/nope.py' does not exist").c_str(),
                         dlrun::ConfigError);
    s.write("train.py", "print(1)\n");
    CHECK_THROWS_WITH_AS(
        resolve_command({"train.py"}, "/nonexistent", s.work()),
        doctest::Contains("'train.py' is a Python script, run with python3 from PATH"),
        dlrun::ConfigError);
  }
  TEST_CASE("other programs are found in PATH, and the hint names one in the working directory") {
    Scratch s;
    s.write("bin/tool", "#!/bin/sh\n", 0755);
    CHECK(resolve_command({"tool", "a"}, s.path(), s.work()).path == s.path() + "/tool");
    CHECK(resolve_command({"tool", "a"}, s.path(), s.work()).argv ==
          std::vector<std::string>{"tool", "a"});
    CHECK_THROWS_WITH_AS(resolve_command({"trian"}, s.path(), s.work()),
                         "program 'trian' not found in PATH", dlrun::ConfigError);
    s.write("train", "#!/bin/sh\n", 0755);
    CHECK_THROWS_WITH_AS(
        resolve_command({"train"}, s.path(), s.work()),
        ("program 'train' not found in PATH; to run the one in " + s.work() + ", write ./train")
            .c_str(),
        dlrun::ConfigError);
    CHECK(resolve_command({"./train"}, s.path(), s.work()).path == "./train");
  }
  TEST_CASE("what is there but is no program says what it is and what runs") {
    Scratch s;
    const auto refused = [&](const std::string& name) {
      try {
        resolve_command({name}, s.path(), s.work());
      } catch (const dlrun::ConfigError& e) {
        return std::string(e.what());
      }
      return std::string("(ran)");
    };
    s.write("ddp.py", "print(1)\n");
    CHECK(refused("ddp") == "program 'ddp' not found in PATH; the Python script in " + s.work() + " is ddp.py");
    fs::create_directories(s.dir / "build");
    // A bare name is looked for in PATH; that it is a directory here comes second.
    CHECK(refused("build") == "program 'build' not found in PATH; 'build' is a directory, not a program: name the "
                              "program in it (build/PROGRAM)");
    CHECK(refused("./build/") == "'./build/' is a directory, not a program: name the program in it (build/PROGRAM)");
    fs::create_directories(s.dir / "pkg");
    s.write("pkg/__init__.py", "");
    CHECK(refused("pkg") ==
          "program 'pkg' not found in PATH; 'pkg' is a directory, a Python package: run it as a module, -m pkg (or -m pkg.train for a module in it)");
    s.write("train.cpp", "int main() {}\n");
    CHECK(refused("./train.cpp") == "'./train.cpp' is source code, not a program: build it, and run the program "
                                    "the build makes");
    s.write("job.toml", "");
    CHECK(refused("job.toml") == "program 'job.toml' not found in PATH; 'job.toml' is not a program; a job file runs with dlrun submit job.toml");
    s.write("tool", "#!/bin/sh\n");  // not executable
    CHECK(refused("tool") == "program 'tool' not found in PATH; the one in " + s.work() +
                                 " is not executable: chmod +x tool, then write ./tool");
    // job.toml's command = ["-m", "pkg.train"]: the interpreter is missing.
    CHECK_THROWS_WITH_AS(resolve_command({"-m", "pkg.train"}, s.path(), s.work()),
                         "program '-m': a module runs through its interpreter: put python3 before it (python3 -m "
                         "pkg.train)",
                         dlrun::ConfigError);
  }
}
