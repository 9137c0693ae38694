#!/usr/bin/env python3
"""How fast `dlrun local` passes its ranks' output on, for two dlrun binaries side by side
(alternated runs, so that the machine's drift falls on both): each rank prints LINES lines of
about 60 bytes, dlrun's stdout goes to /dev/null, and the wall time of the whole run is taken.
Written to measure what RUN_DIR/output.log (a copy of every line) costs: the binary before it
against the one with it.

    python3 bench/output_ab.py OLD_DLRUN NEW_DLRUN [--runs 7] [--lines 1000000] [--nproc 2]
"""
import argparse
import os
import shutil
import statistics
import subprocess
import tempfile
import time


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("old", help="a dlrun binary (the first arm)")
    parser.add_argument("new", help="another dlrun binary (the second arm)")
    parser.add_argument("--runs", type=int, default=7, help="runs of each arm (default 7)")
    parser.add_argument("--lines", type=int, default=1000000, help="lines each rank prints (default 1000000)")
    parser.add_argument("--nproc", type=int, default=2, help="ranks (default 2)")
    args = parser.parse_args()
    tmp = tempfile.mkdtemp(prefix="dlrun-output-bench-")
    env = dict(os.environ, NO_COLOR="1")
    program = ["sh", "-c", f"yes 'step 1234 of epoch 5: loss 0.4321, accuracy 0.8765, lr 0.001' | head -n {args.lines}"]
    times = {args.old: [], args.new: []}
    try:
        for run in range(args.runs):
            for dlrun in (args.old, args.new) if run % 2 == 0 else (args.new, args.old):
                home = os.path.join(tmp, f"home-{run}-{len(times[dlrun])}-{os.path.basename(dlrun)}")
                start = time.perf_counter()
                r = subprocess.run([dlrun, "local", "-q", "--nproc", str(args.nproc), *program],
                                   env=dict(env, DLRUN_HOME=home), stdout=subprocess.DEVNULL,
                                   stderr=subprocess.PIPE, text=True)
                elapsed = time.perf_counter() - start
                if r.returncode != 0:
                    raise SystemExit(f"{dlrun} failed: {r.stderr}")
                times[dlrun].append(elapsed)
                shutil.rmtree(home, ignore_errors=True)
        mb = args.nproc * args.lines * 61 / 1e6
        for dlrun, ts in times.items():
            median = statistics.median(ts)
            print(f"{dlrun}: median {median:.3f} s ({min(ts):.3f}-{max(ts):.3f} s), {mb / median:.0f} MB/s "
                  f"of rank output, {args.runs} runs")
        print(f"new / old: {statistics.median(times[args.new]) / statistics.median(times[args.old]):.3f}")
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


if __name__ == "__main__":
    main()
