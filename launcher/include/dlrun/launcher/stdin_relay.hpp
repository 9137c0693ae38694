#pragma once
// What rank 0 of `dlrun local` reads as its standard input: dlrun's own, as under torchrun, so
// that `… | dlrun local …` works, and with `--stdin` a terminal too (`breakpoint()`, `input()`).
// The other ranks read /dev/null (several readers of one input would each take parts of it).
//
// A file or pipe is handed to rank 0 as it is (each attempt gets the same one). A terminal
// is /dev/null unless asked for (dlrun would take what is typed ahead for the shell, and the
// keys of a pager it pipes to). It cannot be handed over: rank 0 leads a process group of its
// own, which the terminal would stop (SIGTTIN) at its first read. dlrun reads the terminal
// itself, on a thread of its own (a non-blocking flag on the terminal would be the shell's
// too), and writes what was typed into a pipe that is rank 0's standard input, a new one for
// each attempt. The end of input (Ctrl-D) closes the pipe of the attempt that runs, as a
// terminal's end of input is once. While dlrun is in the background (`&`, `bg`) it reads
// nothing, and is not stopped for trying: the terminal answers EIO, and it looks again every
// half second.

#include <atomic>
#include <cstdint>
#include <memory>

namespace dlrun::launcher {

class StdinRelay {
 public:
  // Looks at this process's standard input. Call from the thread that runs the job: the
  // terminal's SIGTTIN is blocked there (a blocked SIGTTIN makes a background read fail with
  // EIO instead of stopping dlrun); the ranks start with no signal blocked.
  // `relay_terminal`: a terminal on standard input is relayed (else rank 0 reads /dev/null).
  explicit StdinRelay(bool relay_terminal);
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
  // How many chunks of typed input were passed on so far (read by the job's thread).
  std::shared_ptr<const std::atomic<uint64_t>> given() const;

  struct Shared;  // with the reading thread, which may outlive this object

 private:
  std::shared_ptr<Shared> m_shared;
  int m_read_end = -1;  // of this attempt's pipe, until started()
};

}  // namespace dlrun::launcher
