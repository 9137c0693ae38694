#include "dlrun/launcher/command_resolution.hpp"

#include <fcntl.h>
#include <fmt/format.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <optional>
#include <string>

#include "dlrun/error.hpp"
#include "dlrun/launcher/process.hpp"

namespace dlrun::launcher {
namespace {

// `name` as the process in `working_dir` will see it.
std::string in_dir(const std::string& name, const std::string& working_dir) {
  if (working_dir.empty() || name.front() == '/') return name;
  // (Not lexically normalised: '..' after a symbolic link is the link target's parent. A
  // leading "./" is only noise in the path said: dropped.)
  std::string_view rest = name;
  while (rest.size() > 2 && rest.substr(0, 2) == "./") rest.remove_prefix(2);
  return working_dir + "/" + std::string(rest);
}

// Whether a script's first lines read as Python (an import, a def): the hint then names python3.
bool reads_as_python(std::string_view head) {
  for (std::string_view word : {"import ", "from ", "def ", "class ", "if __name__"}) {
    for (size_t at = head.find(word); at != std::string_view::npos; at = head.find(word, at + 1)) {
      if (at == 0 || head[at - 1] == '\n') return true;
    }
  }
  return false;
}

// The first bytes of a file (up to 512), or empty.
std::string head_of(const std::string& path) {
  char head[512];
  const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) return {};
  const ssize_t n = ::read(fd, head, sizeof head);
  ::close(fd);
  return n > 0 ? std::string(head, static_cast<size_t>(n)) : std::string();
}

std::string python_hint(const std::string& name) {
  return fmt::format("program '{}' reads as a Python script, but its name does not end in .py and it has no #! line, "
                     "so exec cannot start it: put the interpreter before it (python3 {}), or name it with .py",
                     name, name);
}

// A file that reads as text and has no #! line: exec refuses it (ENOEXEC; a shell would have
// guessed /bin/sh). Said before anything starts, as bad input. A binary, or a file another
// binfmt handler may take, is left to exec.
void check_not_a_bare_script(const std::string& path, const std::string& name) {
  const std::string head = head_of(path);
  if (head.empty() || head.rfind("#!", 0) == 0) return;
  for (size_t i = 0; i < std::min<size_t>(head.size(), 64); ++i) {
    const unsigned char c = static_cast<unsigned char>(head[i]);
    if (!(c >= 0x20 && c < 0x7f) && c != '\n' && c != '\t' && c != '\r') return;  // not plain text
  }
  if (reads_as_python(head)) throw ConfigError(python_hint(name));
  throw ConfigError(fmt::format("program '{}' is a script without a #! line, which exec cannot start: begin it "
                                "with one such as #!/bin/sh, or put the interpreter before it (sh {})",
                                name, name));
}

// Where the script is, as the rank names it: as written if it exists (relative to the
// working directory, as python3 looks for it), else an executable of that name in PATH.
std::string locate_script(const std::string& name, const std::string& path_env,
                          const std::string& working_dir) {
  struct stat st;
  if (::stat(in_dir(name, working_dir).c_str(), &st) == 0) return name;
  if (name.find('/') != std::string::npos) {
    throw ConfigError(fmt::format("program '{}' does not exist", in_dir(name, working_dir)));
  }
  try {
    return resolve_program(name, path_env);
  } catch (const ConfigError&) {
    throw ConfigError(
        fmt::format("Python script '{}' not found in {} nor in PATH", name,
                    working_dir.empty() ? std::string("this directory") : working_dir));
  }
}

bool exists(const std::string& path) {
  struct stat st;
  return ::stat(path.c_str(), &st) == 0;
}

bool is_source_file(const std::string& name) {
  const auto dot = name.rfind('.');
  if (dot == std::string::npos || name.find('/', dot) != std::string::npos) return false;
  const std::string ext = name.substr(dot + 1);
  for (const char* source : {"c", "cc", "cpp", "cxx", "h", "hpp", "cu", "rs", "go", "java"}) {
    if (ext == source) return true;
  }
  return false;
}

// Why `path` (`shown` as the user wrote it) is no program to start, for a directory or a file
// that is not executable; nothing when it may be one.
std::optional<std::string> not_a_program(const std::string& path, const std::string& shown) {
  struct stat st;
  if (::stat(path.c_str(), &st) != 0) return std::nullopt;
  if (S_ISDIR(st.st_mode)) {
    std::string base = shown;
    while (base.size() > 1 && base.back() == '/') base.pop_back();
    if (base.rfind("./", 0) == 0) base = base.substr(2);
    if (exists(path + "/__init__.py") || exists(path + "/__main__.py")) {
      std::string module = base;  // src/pkg: the module src.pkg, from here
      std::replace(module.begin(), module.end(), '/', '.');
      return fmt::format("'{}' is a directory, a Python package: run it as a module, -m {} (or -m {}.train for "
                         "a module in it)",
                         shown, module, module);
    }
    return fmt::format("'{}' is a directory, not a program: name the program in it ({}/PROGRAM)", shown, base);
  }
  if (::access(path.c_str(), X_OK) == 0) return std::nullopt;
  if (is_source_file(shown)) {
    return fmt::format("'{}' is source code, not a program: build it, and run the program the build makes", shown);
  }
  if (shown.size() > 5 && shown.compare(shown.size() - 5, 5, ".toml") == 0) {
    return fmt::format("'{}' is not a program; a job file runs with dlrun submit {}", shown, shown);
  }
  // Not executable, and a chmod +x would not do either (it was suggested first).
  if (const std::string head = head_of(path); head.rfind("#!", 0) != 0 && reads_as_python(head)) return python_hint(shown);
  return std::nullopt;
}

// A program named without a '/' is looked for in PATH only, as execvp does; the hint says
// so when it is in the working directory.
std::string find_in_path(const std::string& name, const std::string& path_env,
                         const std::string& working_dir) {
  try {
    return resolve_program(name, path_env);
  } catch (const ConfigError&) {
    const std::string here = in_dir(name, working_dir);
    const std::string where = working_dir.empty() ? std::string("this directory") : working_dir;
    if (!exists(here)) {
      if (exists(here + ".py")) {
        throw ConfigError(fmt::format("program '{}' not found in PATH; the Python script in {} is {}.py", name,
                                      where, name));
      }
      throw ConfigError(fmt::format("program '{}' not found in PATH", name));
    }
    if (auto why = not_a_program(here, name)) {
      throw ConfigError(fmt::format("program '{}' not found in PATH; {}", name, *why));
    }
    if (::access(here.c_str(), X_OK) != 0) {
      throw ConfigError(fmt::format("program '{}' not found in PATH; the one in {} is not executable: chmod +x {}, "
                                    "then write ./{}",
                                    name, where, name, name));
    }
    throw ConfigError(
        fmt::format("program '{}' not found in PATH; to run the one in {}, write ./{}", name, where, name));
  }
}

}  // namespace

namespace {

bool is_python(std::string_view name) {
  if (name.substr(0, 6) != "python") return false;
  return name.find_first_not_of("0123456789.", 6) == std::string_view::npos;
}

bool is_shell(std::string_view name) { return name == "sh" || name == "bash" || name == "dash" || name == "zsh"; }

}  // namespace

ShownProgram shown_program(const std::vector<std::string>& command) {
  auto named = [](const std::string& word) { return ShownProgram{word, false, {}}; };
  if (command.empty()) return named({});
  // env [NAME=VALUE…] PROGRAM…: the program env runs (a job file's ["/usr/bin/env", "python3", "train.py"]).
  if (const std::string_view head = std::string_view(command.front()).substr(command.front().rfind('/') + 1);
      head == "env") {
    size_t i = 1;
    while (i < command.size() && command[i].find('=') != std::string::npos && command[i][0] != '-') ++i;
    if (i < command.size() && command[i][0] != '-') {
      return shown_program(std::vector<std::string>(command.begin() + static_cast<long>(i), command.end()));
    }
  }
  const std::string& first = command.front();
  const std::string_view name = std::string_view(first).substr(first.rfind('/') + 1);
  const bool python = is_python(name);
  if (!python && !is_shell(name)) return named(first);
  // Options an interpreter takes before its script, those followed by a value of their own.
  for (size_t i = 1; i < command.size(); ++i) {
    const std::string& word = command[i];
    if (word == "--") return i + 1 < command.size() ? named(command[i + 1]) : named(first);
    if (word.empty() || word[0] != '-' || word == "-") {
      return named(word.empty() || word == "-" ? first : word);
    }
    if (word == "-c") return named(first);  // a command string: no script to name
    if (python && word == "-m") {
      return i + 1 < command.size() ? ShownProgram{command[i + 1], true, first} : named(first);
    }
    const bool takes_value = python ? word == "-X" || word == "-W" : word == "-o" || word == "-O";
    if (takes_value) ++i;
  }
  return named(first);
}

bool is_python_script(std::string_view program) {
  return program.size() > 3 && program.substr(program.size() - 3) == ".py";
}

std::vector<std::string> python_module_command(const std::vector<std::string>& words) {
  if (words.empty())
    throw ConfigError(
        "-m: no module given: put the module after the options, e.g. -m pkg.train ARGS");
  std::vector<std::string> command = {k_python, "-m"};
  command.insert(command.end(), words.begin(), words.end());
  return command;
}

ProgramSpec resolve_command(const std::vector<std::string>& command, const std::string& path_env,
                            const std::string& working_dir) {
  if (command.empty() || command.front().empty()) {
    throw ConfigError("no program given: put the program to run after the options");
  }
  const std::string& name = command.front();
  if (name == "-m") {
    throw ConfigError(fmt::format("program '-m': a module runs through its interpreter: put python3 before it "
                                  "(python3 -m {})",
                                  command.size() > 1 ? command[1] : std::string("MODULE")));
  }
  if (!is_python_script(name)) {
    if (name.find('/') == std::string::npos) {
      std::string found = find_in_path(name, path_env, working_dir);
      check_not_a_bare_script(found, name);
      return {found, command, {}};
    }
    if (auto why = not_a_program(in_dir(name, working_dir), name)) throw ConfigError(*why);
    // throws when it cannot run there
    check_not_a_bare_script(resolve_program(in_dir(name, working_dir), path_env), in_dir(name, working_dir));
    return {name, command, {}};
  }
  // Always python3, as torchrun runs a script whatever its #! line says (a stale one named an
  // interpreter that was not there, or one without torch).
  std::string script = locate_script(name, path_env, working_dir);
  ProgramSpec python;
  try {
    python.path = resolve_program(k_python, path_env);
  } catch (const ConfigError&) {
    throw ConfigError(
        fmt::format("'{}' is a Python script, run with {} from PATH (as torchrun does), but PATH "
                    "has no {}: put the interpreter before the script, e.g. /usr/bin/python3 {}",
                    name, k_python, k_python, name));
  }
  python.argv = {k_python, script};
  python.argv.insert(python.argv.end(), command.begin() + 1, command.end());
  return python;
}

}  // namespace dlrun::launcher
