#pragma once
// What rank 0 of `dlrun local` reads as its standard input: dlrun's own, as under torchrun, so
// that `breakpoint()` (pdb), `input()` and `… | dlrun local …` work. The other ranks read
// /dev/null (several readers of one input would each take parts of it).
//
// A file or pipe is handed to rank 0 as it is (each attempt gets the same one). A terminal
// cannot be: rank 0 leads a process group of its own, which the terminal would stop
// (SIGTTIN) at its first read. dlrun then reads the terminal itself, on a thread of its own
// (a non-blocking flag on the terminal would be the shell's too), and writes what was typed
// into a pipe that is rank 0's standard input, a new one for each attempt. At the end of
// input (Ctrl-D) the pipe is closed, and later attempts read /dev/null. While dlrun is in the
// background (`&`, `bg`) it reads nothing, and is not stopped for trying: the terminal
// answers EIO, and it looks again every half second.

#include <memory>

namespace dlrun::launcher {

class StdinRelay {
 public:
  // Looks at this process's standard input. Call from the thread that runs the job: the
  // terminal's SIGTTIN is blocked there (a blocked SIGTTIN makes a background read fail with
  // EIO instead of stopping dlrun); the ranks start with no signal blocked.
  StdinRelay();
  ~StdinRelay();
  StdinRelay(const StdinRelay&) = delete;
  StdinRelay& operator=(const StdinRelay&) = delete;

  // The fd to give rank 0 of the next attempt as its stdin (it is dup'ed at the spawn), or -1
  // for /dev/null. Call started() once rank 0 runs.
  int for_attempt();
  void started();
  // Whether it relays a terminal: rank 0's unfinished lines (a prompt) are then shown as they
  // come.
  bool relays_terminal() const;

  struct Shared;  // with the reading thread, which may outlive this object

 private:
  std::shared_ptr<Shared> m_shared;
  int m_read_end = -1;  // of this attempt's pipe, until started()
};

}  // namespace dlrun::launcher
