#!/usr/bin/env python3
"""Elastic latency: from `dlrun resize` to the first completed step at the new size, for
examples/fashion_mnist on the runtime, split into phases read off the run's own output:

  stop + checkpoint   request sent → rank 0 prints "stopped after step …" (all ranks agreed
                      on a step; rank 0 saved the checkpoint)
  exit + respawn      → dlrun prints "now running N ranks" (old ranks gone, new ones started)
  init + restore      → rank 0 prints "resumed from step …" (LibTorch, rendezvous, checkpoint load)
  first step          → the first step at the new size is done (--trace-dir loss.txt grows)

and, for comparison, torchrun restarting the same model in Python DDP (examples/python_ddp)
after a worker is killed: kill → first step of the new group.
Usage: bench/rescale.py BUILD_DIR [--runs K]"""
import argparse
import os
import re
import shutil
import signal
import statistics
import subprocess
import sys
import tempfile
import threading
import time

HERE = os.path.dirname(os.path.abspath(__file__))
TORCHRUN = os.path.join(HERE, "..", "..", "shared", "bench", "torchrun-debian")


class Lines:
    """Reads a stream on a thread, keeping (time, line)."""

    def __init__(self, stream):
        self.lines = []
        self.thread = threading.Thread(target=self._read, args=(stream,), daemon=True)
        self.thread.start()

    def _read(self, stream):
        for line in iter(stream.readline, ""):
            self.lines.append((time.monotonic(), line.rstrip("\n")))

    def first(self, pattern, after, timeout=120):
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            for t, line in list(self.lines):
                if t >= after and re.search(pattern, line):
                    return t
            time.sleep(0.005)
        raise SystemExit(f"no line matching {pattern!r}")


def count_lines(path):
    try:
        with open(path) as f:
            return sum(1 for _ in f)
    except FileNotFoundError:
        return 0


def one_resize(build, tmp, size_from, size_to):
    home = os.path.join(tmp, "home")
    trace = os.path.join(tmp, "trace")
    env = dict(os.environ, DLRUN_HOME=home, NO_COLOR="1")
    example = os.path.join(build, "examples", "fashion_mnist", "fashion_mnist")
    p = subprocess.Popen([os.path.join(build, "cli", "dlrun"), "local", "--nproc", f"1:{max(size_from, size_to)}",
                          "--", example, "--epochs", "1", "--batch-size", "64",
                          "--trace-dir", trace, "--checkpoint-dir", os.path.join(tmp, "ckpt")],
                         stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env)
    out, err = Lines(p.stdout), Lines(p.stderr)
    job = None
    while job is None:
        for _, line in err.lines:
            m = re.match(r"dlrun: job (\S+):", line)
            if m:
                job = m.group(1)
        time.sleep(0.01)
    if size_from != max(size_from, size_to):
        # dlrun resize refuses ranks that have not yet said they handle the stop request.
        while not os.path.exists(os.path.join(home, "runs", job, "handles-stop")):
            time.sleep(0.01)
        subprocess.run([os.path.join(build, "cli", "dlrun"), "resize", job, str(size_from)], env=env, check=True,
                       capture_output=True)
    while count_lines(os.path.join(trace, "loss.txt")) < 40:
        time.sleep(0.01)
    t0 = time.monotonic()
    subprocess.run([os.path.join(build, "cli", "dlrun"), "resize", job, str(size_to)], env=env, check=True,
                   capture_output=True)
    t_stop = out.first(r"stopped after step", t0)
    t_respawn = err.first(rf"now running {size_to} rank", t0)
    t_restore = out.first(r"resumed from step", t0)
    before = count_lines(os.path.join(trace, "loss.txt"))
    while count_lines(os.path.join(trace, "loss.txt")) <= before:
        time.sleep(0.002)
    t_step = time.monotonic()
    p.send_signal(signal.SIGKILL)
    p.wait()
    return [t_stop - t0, t_respawn - t_stop, t_restore - t_respawn, t_step - t_restore, t_step - t0]


def torchrun_restart(tmp):
    script = os.path.join(HERE, "..", "examples", "python_ddp", "train.py")
    p = subprocess.Popen([TORCHRUN, "--nproc_per_node", "2", "--max_restarts", "1", "--monitor_interval", "0.1",
                          script, "--epochs", "1", "--train-limit", "20000", "--log-steps"],
                         stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True,
                         env=dict(os.environ, OMP_NUM_THREADS="1"), start_new_session=True)
    out = Lines(p.stdout)
    out.first(r"^step 20 ", 0, timeout=300)
    workers = subprocess.run(["pgrep", "-f", "-P", str(p.pid), "train.py"], capture_output=True, text=True).stdout.split()
    if not workers:  # torchrun runs the workers as grandchildren through its agent
        workers = subprocess.run(["pgrep", "-f", "python_ddp/train.py --epochs"], capture_output=True, text=True).stdout.split()
    victim = max(int(w) for w in workers if int(w) != p.pid)
    t0 = time.monotonic()
    os.kill(victim, signal.SIGKILL)
    t_step = out.first(r"^step 1 ", t0, timeout=300)
    os.killpg(p.pid, signal.SIGKILL)
    p.wait()
    return t_step - t0


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("build")
    parser.add_argument("--runs", type=int, default=3)
    args = parser.parse_args()
    rows = []
    for size_from, size_to in ((2, 1), (1, 2)):
        samples = []
        for _ in range(args.runs):
            tmp = tempfile.mkdtemp(prefix="dlrun-rescale-")
            try:
                samples.append(one_resize(args.build, tmp, size_from, size_to))
            finally:
                shutil.rmtree(tmp, ignore_errors=True)
        rows.append((f"dlrun resize {size_from} → {size_to} ranks", [statistics.median(c) for c in zip(*samples)]))
    print("| | stop + checkpoint | exit + respawn | init + restore | first step | total |")
    print("|---|---|---|---|---|---|")
    for name, phases in rows:
        print(f"| {name} | " + " | ".join(f"{x:.2f} s" for x in phases) + " |")
    if os.path.exists(TORCHRUN):
        tmp = tempfile.mkdtemp(prefix="dlrun-rescale-")
        try:
            t = statistics.median(torchrun_restart(tmp) for _ in range(args.runs))
        finally:
            shutil.rmtree(tmp, ignore_errors=True)
        print(f"| torchrun restart after a worker is killed (2 ranks, Python DDP, no checkpoint) | | | | | {t:.2f} s |")


if __name__ == "__main__":
    main()
