#pragma once
// How the words of a training command become the program dlrun executes, the same for
// `dlrun local`, a submitted job.toml's command and each host of `dlrun run`
// (docs/local.md#the-program). PROGRAM ARGS… runs PROGRAM, found in PATH when its name has no
// '/'. A Python script (a name ending in ".py") runs as torchrun runs it, through the
// interpreter: python3 from PATH (an activated virtualenv's or conda's first), unless it is an
// executable file that names its own interpreter in a #! line. `-m MODULE` (torchrun's
// --module) is python3 -m MODULE. Only a name ending in ".py" costs more than a string check.
// Reads the file system; thread-safe.

#include <string>
#include <string_view>
#include <vector>

#include "dlrun/launcher/member.hpp"

namespace dlrun::launcher {

// The interpreter of Python scripts and modules, looked up in the rank's PATH.
inline constexpr const char* k_python = "python3";

// Whether `program` is run through Python: its name ends in ".py".
bool is_python_script(std::string_view program);

// The program as its user would name it: the script an interpreter runs (python3 -u train.py
// → "train.py", bash run.sh → "run.sh"), "python3 -m pkg.train" for a module, else the first
// word. For the job's default name and the line that starts it.
struct ShownProgram {
  std::string word;     // the script, the module, or the program
  bool module = false;  // `word` is a module, run by `interpreter -m`
  std::string interpreter;
};
ShownProgram shown_program(const std::vector<std::string>& command);

// {MODULE, ARGS…} → {"python3", "-m", MODULE, ARGS…}. Throws ConfigError without a module.
std::vector<std::string> python_module_command(const std::vector<std::string>& words);

// The program that runs `command` (program and arguments): its path and argv, the working
// directory left empty. `path_env` is the rank's PATH; `working_dir` is where it will run
// (empty: this process's own), against which relative names are checked. Throws
// ConfigError, naming the program, when it is missing or cannot be run.
ProgramSpec resolve_command(const std::vector<std::string>& command, const std::string& path_env,
                            const std::string& working_dir = {});

}  // namespace dlrun::launcher
