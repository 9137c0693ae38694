#!/usr/bin/env python3
"""Launch overhead: wall time of starting N ranks of /bin/true and waiting for them,
dlrun vs torchrun (Debian's, through shared/bench/torchrun-debian). Prints a Markdown
table; median of repeated runs. Usage: bench/launch.py DLRUN [--runs K] [--torchrun PATH]"""
import argparse
import os
import subprocess

import tempfile
import time

from timing import print_table, time_runs


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("dlrun")
    parser.add_argument("--runs", type=int, default=21)
    parser.add_argument("--torchrun", default=os.path.join(os.path.dirname(os.path.abspath(__file__)),
                                                          "..", "..", "shared", "bench", "torchrun-debian"))
    args = parser.parse_args()
    env = dict(os.environ, DLRUN_HOME=tempfile.mkdtemp(prefix="dlrun-bench-"))
    rows = []
    for n in (8, 256):
        rows.append((f"dlrun local --nproc {n} /bin/true",
                     time_runs([args.dlrun, "local", "-q", "--nproc", str(n), "/bin/true"], args.runs, env)))
    if os.path.exists(args.torchrun):
        cmd = [args.torchrun, "--nproc_per_node", "8", "--monitor_interval", "0.1", "--no_python", "/bin/true"]
        rows.append(("torchrun --nproc_per_node 8 --monitor_interval 0.1 --no_python /bin/true",
                     time_runs(cmd, max(3, args.runs // 4), env)))
    print_table(rows)
    if len(rows) == 3:
        print(f"\ndlrun is {rows[2][1][0] / rows[0][1][0]:.0f}x faster than torchrun at 8 ranks.")


if __name__ == "__main__":
    main()
