"""Shared helpers for the integration tests: run the built dlrun with a timeout, in a
fresh DLRUN_HOME, and look at processes. Every test drives the real binary."""

import os
import shutil
import signal
import subprocess
import tempfile
import time
import unittest

DLRUN = os.environ.get("DLRUN_BIN", "dlrun")
SOURCE_DIR = os.environ.get("DLRUN_SOURCE_DIR", os.path.abspath(os.path.join(os.path.dirname(__file__), "..", "..")))
BUILD_DIR = os.environ.get("DLRUN_BUILD_DIR", os.path.join(SOURCE_DIR, "build"))
PYTHON = "/usr/bin/python3" if os.path.exists("/usr/bin/python3") else "python3"


class DlrunTestCase(unittest.TestCase):
    """Each test gets its own DLRUN_HOME and scratch directory, removed afterwards."""

    def setUp(self):
        self.tmp = tempfile.mkdtemp(prefix="dlrun-test-")
        self.home = os.path.join(self.tmp, "home")
        self.env = dict(os.environ)
        self.env["DLRUN_HOME"] = self.home
        self.env.pop("CUDA_VISIBLE_DEVICES", None)
        self.env.pop("DLRUN_FAKE_GPUS", None)
        self.env.pop("DLRUN_GPU_CLAIMS_DIR", None)  # each test that claims GPUs says where
        self.env.pop("OMP_NUM_THREADS", None)
        self.env["NO_COLOR"] = "1"

    def tearDown(self):
        for p in getattr(self, "_started", []):
            if p.poll() is None:
                p.kill()
            p.communicate()
        shutil.rmtree(self.tmp, ignore_errors=True)

    def small_disk(self, size="2m"):
        """A tmpfs of SIZE under the scratch directory, unmounted after the test (root only:
        the test is skipped otherwise)."""
        disk = os.path.join(self.tmp, "disk")
        os.makedirs(disk)
        if subprocess.run(["mount", "-t", "tmpfs", "-o", f"size={size}", "tmpfs", disk],
                          stderr=subprocess.DEVNULL).returncode != 0:
            self.skipTest("needs to mount a tmpfs (root)")
        self.addCleanup(subprocess.run, ["umount", "-l", disk])
        return disk

    @staticmethod
    def fill(disk):
        """Fills DISK's file system; returns the filler's path (removing it makes room)."""
        filler = os.path.join(disk, "filler")
        fd = os.open(filler, os.O_WRONLY | os.O_CREAT)
        try:
            while os.write(fd, b"\0" * 65536) > 0:
                pass
        except OSError:
            pass
        os.close(fd)
        return filler

    def dlrun(self, *args, timeout=120, env=None, **kwargs):
        """Runs dlrun to its end; returns CompletedProcess with text stdout/stderr."""
        return subprocess.run([DLRUN, *args], capture_output=True, text=True, timeout=timeout,
                              env=env or self.env, **kwargs)

    def start(self, *args, env=None, **kwargs):
        """Starts dlrun in the background (own session, so test signals stay targeted)."""
        p = subprocess.Popen([DLRUN, *args], stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                             text=True, env=env or self.env, start_new_session=True, **kwargs)
        self._started = getattr(self, "_started", []) + [p]
        return p

    def script(self, name, text):
        """Writes an executable shell script into the scratch directory."""
        path = os.path.join(self.tmp, name)
        with open(path, "w") as f:
            f.write("#!/bin/sh\n" + text)
        os.chmod(path, 0o755)
        return path

    def run_dir(self):
        return os.path.join(self.tmp, "run")


def pid_alive(pid):
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    # A zombie is dead for our purposes. The process can be reaped between the open and the
    # read: reading its stat then fails with ESRCH (ProcessLookupError), as after the open.
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().split(")")[-1].split()[0] != "Z"
    except (FileNotFoundError, ProcessLookupError):
        return False


def wait_for(predicate, timeout=10.0, interval=0.02):
    """Polls predicate until it is true or timeout passes; returns its last value."""
    deadline = time.monotonic() + timeout
    while True:
        value = predicate()
        if value or time.monotonic() > deadline:
            return value
        time.sleep(interval)


def read_pids(path):
    try:
        with open(path) as f:
            return [int(line) for line in f.read().split()]
    except FileNotFoundError:
        return []


def read_words(path):
    """The whitespace-separated words of a file, [] while it does not exist."""
    try:
        with open(path) as f:
            return f.read().split()
    except FileNotFoundError:
        return []


def processes(predicate):
    """Pids of the processes whose argv (a list of str) satisfies predicate."""
    found = []
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            with open(f"/proc/{entry}/cmdline", "rb") as f:
                argv = f.read().decode(errors="replace").split("\0")
        except OSError:
            continue
        if predicate(argv):
            found.append(int(entry))
    return found


def kill_quietly(pids):
    for pid in pids:
        try:
            os.kill(pid, signal.SIGKILL)
        except (ProcessLookupError, PermissionError):
            pass
