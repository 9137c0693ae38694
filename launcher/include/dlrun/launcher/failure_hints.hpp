#pragma once
// What a failure report adds to a rank's own words when they point elsewhere: which Python ran
// when it could not import a module, and whether the rank's stderr tells of a lost peer (then
// another rank may be the cause). Pure text logic, no I/O; thread-safe.

#include <deque>
#include <string>

#include "dlrun/launcher/member.hpp"

namespace dlrun::launcher {

// "\n  (the ranks ran PYTHON, which cannot import 'MODULE': …)" when the tail holds Python's
// `ModuleNotFoundError: No module named 'MODULE…'` and `program` runs a Python; empty otherwise.
// For dlrun's own module (`import dlrun`), `own_package_dir` is where this dlrun's Python package
// is (own_python_package_dir()), if known: the hint names PYTHONPATH with it.
std::string missing_module_hint(const std::deque<std::string>& stderr_tail, const ProgramSpec& program,
                                const std::string& own_package_dir = {});

// The directory to put on PYTHONPATH for this dlrun's Python package (`dlrun/` with its
// `_dlrun` extension): beside the executable in a build tree (BUILD/python), or under its
// prefix once installed (PREFIX/lib/python3.X/dist-packages). Empty when there is none.
std::string own_python_package_dir();

// "\n  (MASTER_PORT PORT was in use …)" when the tail says that an address was in use
// (EADDRINUSE): a port another job took, or a program that starts two stores on MASTER_PORT
// (dlrun.init() and torch.distributed.init_process_group()); empty otherwise.
std::string port_in_use_hint(const std::deque<std::string>& stderr_tail, const std::string& master_port);

// "\n  (pdb read the end of its input: …)" when the tail shows pdb quitting (bdb.BdbQuit, a
// breakpoint() that read nothing): only rank 0 of dlrun local reads dlrun's stdin, the others
// /dev/null. Empty otherwise.
std::string debugger_hint(const std::deque<std::string>& stderr_tail, const ProgramSpec& program);

// Whether these stderr lines tell of the rank's peers: a connection lost, a collective that
// failed or timed out (Gloo's, NCCL's, the runtime's words).
bool tells_of_peers(const std::deque<std::string>& stderr_tail);

// Whether these stderr lines end with an error of the program's own: a last line that names an
// exception (`ValueError: …`, as a Python traceback ends), or C++'s `terminate called …` /
// `what():`, Rust's `panicked at` among the last three. Not a stop (KeyboardInterrupt,
// SystemExit) nor a lost peer (tells_of_peers), nor an error logged before other lines.
bool tells_of_an_error(const std::deque<std::string>& stderr_tail);

// Whether the last stderr line says the rank lost a peer: a connection closed or reset by it,
// a broken pipe, a peer that exited mid-collective (not a refused connection: its own).
bool lost_a_peer(const std::deque<std::string>& stderr_tail);

}  // namespace dlrun::launcher
