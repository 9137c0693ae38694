#include "dlrun/launcher/failure_hints.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <cctype>
#include <string_view>
#include <filesystem>

#include "dlrun/launcher/command_resolution.hpp"
#include "dlrun/launcher/ssh.hpp"  // shell_quote

namespace dlrun::launcher {

std::string own_python_package_dir() {
  std::error_code ec;
  const auto exe = std::filesystem::read_symlink("/proc/self/exe", ec);
  if (ec) return {};
  const auto bin = exe.parent_path();
  std::vector<std::filesystem::path> candidates = {bin.parent_path() / "python"};  // BUILD/cli/dlrun
  for (auto it = std::filesystem::directory_iterator(bin.parent_path() / "lib", ec);
       !ec && it != std::filesystem::directory_iterator(); it.increment(ec)) {
    if (it->path().filename().string().rfind("python3", 0) == 0) candidates.push_back(it->path() / "dist-packages");
  }
  for (const auto& dir : candidates) {
    if (std::filesystem::exists(dir / "dlrun" / "__init__.py", ec)) return dir.string();
  }
  return {};
}

std::string missing_module_hint(const std::deque<std::string>& tail, const ProgramSpec& program,
                                const std::string& own_package_dir) {
  // PATH's python3 may be a virtualenv's or pyenv's, not the one that has the module.
  const std::string interpreter = std::filesystem::path(program.path).filename().string();
  if (interpreter.rfind("python", 0) != 0) return {};
  static const std::string marker = "ModuleNotFoundError: No module named '";
  for (const auto& line : tail) {
    const size_t at = line.find(marker);
    if (at == std::string::npos) continue;
    const size_t begin = at + marker.size();
    const std::string module = line.substr(begin, line.find_first_of("'.", begin) - begin);
    if (module.empty()) continue;
    if (module == "dlrun" && !own_package_dir.empty()) {
      return fmt::format("\n  (dlrun's own Python package is in {}: PYTHONPATH={} dlrun local …, or PYTHONPATH in a "
                         "job file's [env]; docs/python.md)",
                         own_package_dir, own_package_dir);
    }
    const std::string cannot = fmt::format("\n  (the ranks ran {}, which cannot import '{}': install it there, or put "
                                           "the Python that has it before the script",
                                           program.path, module);
    if (program.path == "/usr/bin/python3") return cannot + ")";
    const ShownProgram shown = shown_program(program.argv);
    return fmt::format("{}, e.g. /usr/bin/python3 {}{})", cannot, shown.module ? "-m " : "", shown.word);
  }
  return {};
}

std::string port_in_use_hint(const std::deque<std::string>& tail, const std::string& master_port) {
  const bool in_use = std::any_of(tail.begin(), tail.end(), [](const std::string& line) {
    return line.find("Address already in use") != std::string::npos || line.find("EADDRINUSE") != std::string::npos;
  });
  if (!in_use) return {};
  return fmt::format("\n  (an address was in use{}: another job given the same --master-port, or a program that "
                     "starts a second store on it: dlrun.init() and torch.distributed.init_process_group() each "
                     "start one, call only one of them)",
                     master_port.empty() ? "" : fmt::format(", MASTER_PORT is {}", master_port));
}

std::string debugger_hint(const std::deque<std::string>& tail, const ProgramSpec& program) {
  const bool quit = std::any_of(tail.begin(), tail.end(),
                                [](const std::string& line) { return line.find("bdb.BdbQuit") != std::string::npos; });
  if (!quit) {
    // input() at the end of its input (a terminal that rank 0 does not read without --stdin).
    const bool eof = std::any_of(tail.begin(), tail.end(), [](const std::string& line) {
      return line.find("EOFError: EOF when reading a line") != std::string::npos;
    });
    if (!eof) return {};
    return "\n  (input() read the end of its input: rank 0 of dlrun local reads the terminal with --stdin (dlrun "
           "local --stdin …), and what is piped in (… | dlrun local …); the other ranks, and submitted jobs, read "
           "/dev/null)";
  }
  std::string command;
  for (const auto& word : program.argv) command += (command.empty() ? "" : " ") + shell_quote(word);
  return fmt::format("\n  (pdb read the end of its input: rank 0 of dlrun local reads the terminal with --stdin "
                     "(dlrun local --stdin …), and what is piped in; the other ranks, and submitted jobs, read "
                     "/dev/null, so a breakpoint() there ends the rank. Put it in rank 0 (if "
                     "int(os.environ[\"RANK\"]) == 0: breakpoint()) and add --stdin, or run the program alone as a "
                     "world of one: MASTER_ADDR=127.0.0.1 MASTER_PORT=29500 RANK=0 LOCAL_RANK=0 WORLD_SIZE=1 {})",
                     command);
}

bool tells_of_peers(const std::deque<std::string>& tail) {
  return std::any_of(tail.begin(), tail.end(), [](const std::string& line) {
    for (const char* word : {"peer", "Connection", "connection", "gloo", "Gloo", "NCCL", "allreduce", "collective",
                             "timed out", "Timeout", "broken pipe", "Broken pipe"}) {
      if (line.find(word) != std::string::npos) return true;
    }
    return false;
  });
}

namespace {

// `ValueError: …`, `torch.cuda.OutOfMemoryError: …`, `MyException`: a dotted name ending in Error or
// Exception, alone or before a colon.
bool names_an_exception(const std::string& line) {
  size_t end = 0;
  while (end < line.size() && (std::isalnum(static_cast<unsigned char>(line[end])) || line[end] == '_' ||
                               line[end] == '.')) {
    ++end;
  }
  if (end == 0 || (end < line.size() && line[end] != ':')) return false;
  const std::string name = line.substr(0, end);
  const auto ends_with = [&name](std::string_view suffix) {
    return name.size() >= suffix.size() && name.compare(name.size() - suffix.size(), suffix.size(), suffix) == 0;
  };
  return ends_with("Error") || ends_with("Exception");
}

}  // namespace

bool lost_a_peer(const std::deque<std::string>& tail) {
  if (tail.empty()) return false;
  // Its last words: the error it ended with, not a warning before it.
  const std::string& last = tail.back();
  for (const char* words : {"by peer", "Broken pipe", "broken pipe", "exited in the middle of", "remote process exited",
                            "Connection closed", "connection closed"}) {
    if (last.find(words) != std::string::npos) return true;
  }
  return false;
}

bool tells_of_an_error(const std::deque<std::string>& tail) {
  if (tail.empty() || tells_of_peers(tail)) return false;
  // It ended with it: its last line names the exception (Python's traceback ends so), or one
  // of the last three is C++'s or Rust's end. An error it logged and lived on after is not.
  const std::string& last = tail.back();
  for (const char* stop : {"KeyboardInterrupt", "SystemExit"}) {
    if (last.find(stop) != std::string::npos) return false;
  }
  if (names_an_exception(last)) return true;
  const size_t from = tail.size() > 3 ? tail.size() - 3 : 0;
  for (size_t i = from; i < tail.size(); ++i) {
    for (const char* word : {"terminate called", "what():", "panicked at"}) {
      if (tail[i].find(word) != std::string::npos) return true;
    }
  }
  return false;
}

}  // namespace dlrun::launcher
