#include "dlrun/launcher/failure_hints.hpp"

#include <doctest/doctest.h>

using namespace dlrun::launcher;

TEST_SUITE("launcher::failure_hints") {
  TEST_CASE("a module a Python could not import names that Python and the script") {
    const std::deque<std::string> tail = {"Traceback (most recent call last):", "    import torch.distributed",
                                          "ModuleNotFoundError: No module named 'torch'"};
    ProgramSpec pyenv{"/root/.pyenv/shims/python3", {"python3", "-u", "train.py"}, ""};
    CHECK(missing_module_hint(tail, pyenv) ==
          "\n  (the ranks ran /root/.pyenv/shims/python3, which cannot import 'torch': install it there, or put the "
          "Python that has it before the script, e.g. /usr/bin/python3 train.py)");
    ProgramSpec module{"/opt/venv/bin/python3", {"python3", "-m", "pkg.train"}, ""};
    CHECK(missing_module_hint(tail, module).find("e.g. /usr/bin/python3 -m pkg.train)") != std::string::npos);
    // Debian's own python3 lacks it: no other interpreter to offer.
    ProgramSpec debian{"/usr/bin/python3", {"python3", "train.py"}, ""};
    CHECK(missing_module_hint(tail, debian) ==
          "\n  (the ranks ran /usr/bin/python3, which cannot import 'torch': install it there, or put the Python "
          "that has it before the script)");
    // Not a Python, or nothing missing: nothing said.
    CHECK(missing_module_hint(tail, ProgramSpec{"/bin/sh", {"sh", "x"}, ""}).empty());
    CHECK(missing_module_hint({"ValueError: bad"}, pyenv).empty());
    // dlrun's own module: where this dlrun's package is, for PYTHONPATH.
    const std::deque<std::string> own = {"ModuleNotFoundError: No module named 'dlrun'"};
    CHECK(missing_module_hint(own, debian, "/opt/dlrun/lib/python3.11/dist-packages") ==
          "\n  (dlrun's own Python package is in /opt/dlrun/lib/python3.11/dist-packages: "
          "PYTHONPATH=/opt/dlrun/lib/python3.11/dist-packages dlrun local …, or PYTHONPATH in a job file's [env]; "
          "docs/python.md)");
    CHECK(missing_module_hint(own, debian).find("cannot import 'dlrun'") != std::string::npos);
  }
  TEST_CASE("an address in use names the port and the two ways it happens") {
    const std::deque<std::string> tail = {
        "RuntimeError: The server socket has failed to bind to [::]:43755 (errno: 98 - Address already in use)."};
    CHECK(port_in_use_hint(tail, "43755") ==
          "\n  (an address was in use, MASTER_PORT is 43755: another job given the same --master-port, or a program "
          "that starts a second store on it: dlrun.init() and torch.distributed.init_process_group() each start one, "
          "call only one of them)");
    CHECK(port_in_use_hint({"bind: EADDRINUSE"}, "").find("(an address was in use: another job") != std::string::npos);
    CHECK(port_in_use_hint({"ValueError: bad"}, "29500").empty());
  }
  TEST_CASE("pdb that quit at once says that the ranks read no input, and how to debug") {
    ProgramSpec script{"/usr/bin/python3", {"python3", "-u", "train.py", "--lr", "1"}, ""};
    const std::string hint = debugger_hint({"    raise BdbQuit", "bdb.BdbQuit"}, script);
    CHECK(hint.find("rank 0 of dlrun local reads the terminal with --stdin") != std::string::npos);
    CHECK(hint.find("WORLD_SIZE=1 python3 -u train.py --lr 1)") != std::string::npos);
    CHECK(debugger_hint({"ValueError: bad"}, script).empty());
    CHECK(debugger_hint({"    name = input()", "EOFError: EOF when reading a line"}, script)
              .find("input() read the end of its input: rank 0 of dlrun local reads the terminal with --stdin") !=
          std::string::npos);
  }
  TEST_CASE("stderr that tells of lost peers") {
    CHECK(tells_of_peers({"[../gloo/transport/tcp/pair.cc:598] Connection closed by peer"}));
    CHECK(tells_of_peers({"rank 0: rank 1 (pid 42) exited in the middle of a gradient allreduce"}));
    CHECK_FALSE(tells_of_peers({"ValueError: bad batch size 7"}));
    CHECK_FALSE(tells_of_peers({}));
  }
  TEST_CASE("stderr that shows an error of the program's own") {
    CHECK(tells_of_an_error({"Traceback (most recent call last):", "  File \"t.py\", line 7", "ValueError: NaN loss"}));
    // Logged, and lived on after: not how it ended.
    CHECK_FALSE(tells_of_an_error({"Traceback (most recent call last):", "ModuleNotFoundError: No module named 'x'",
                                   "step 10 loss 0.3"}));
    CHECK(lost_a_peer({"RuntimeError: [../gloo/transport/tcp/pair.cc:598] Connection closed by peer [127.0.0.1]:5"}));
    CHECK(lost_a_peer({"RuntimeError: [gloo/pair.cc:589] Read error [127.0.0.1]:6: Connection reset by peer"}));
    CHECK_FALSE(lost_a_peer({"ConnectionRefusedError: [Errno 111] Connection refused"}));
    CHECK_FALSE(lost_a_peer({"Connection closed by peer", "ValueError: its own, after"}));
    CHECK(tells_of_an_error({"torch.cuda.OutOfMemoryError: CUDA out of memory."}));
    CHECK(tells_of_an_error({"MyException"}));
    CHECK(tells_of_an_error({"terminate called after throwing an instance of 'std::runtime_error'", "  what():  bad"}));
    CHECK(tells_of_an_error({"thread 'main' panicked at src/main.rs:3:5:", "note: run with RUST_BACKTRACE=1"}));
    CHECK_FALSE(tells_of_an_error({"step 10 loss 0.3"}));
    CHECK_FALSE(tells_of_an_error({"Traceback (most recent call last):", "KeyboardInterrupt"}));
    CHECK_FALSE(tells_of_an_error({"RuntimeError: [../gloo/transport/tcp/pair.cc:598] Connection closed by peer"}));
    CHECK_FALSE(tells_of_an_error({"ErrorCount: 3 of 10 lines"}));
    CHECK_FALSE(tells_of_an_error({}));
  }
}
