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
  }
  TEST_CASE("stderr that tells of lost peers") {
    CHECK(tells_of_peers({"[../gloo/transport/tcp/pair.cc:598] Connection closed by peer"}));
    CHECK(tells_of_peers({"rank 0: rank 1 (pid 42) exited in the middle of a gradient allreduce"}));
    CHECK_FALSE(tells_of_peers({"ValueError: bad batch size 7"}));
    CHECK_FALSE(tells_of_peers({}));
  }
}
