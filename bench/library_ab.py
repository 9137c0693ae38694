#!/usr/bin/env python3
"""A/B of two builds of the runtime library on the adaptive example: each case's adaptive run
(examples/fashion_mnist --adaptive under `dlrun local --nproc 2`) with libdlrun_runtime.so.0 from
--lib-a and from --lib-b (put first in LD_LIBRARY_PATH, which comes before the example's RUNPATH),
alternated within every round (a, b, then b, a in the next), so that a machine that slows down
or speeds up weighs on both alike. Prints each run's time to the target, samples, steps and how
many lines of its log match --count (default: the batch's switches), then per case the medians.

Usage: bench/library_ab.py BUILD --lib-a DIR --lib-b DIR [--rounds 5] [--case NAME=ARGS ...]
                           [--count TEXT] [--timeout SECONDS]

Without --case, the four cases of docs/benchmarks.md ("Lease 4", the CPU A/B of the faster
climb): the CNN to 88%, the CPU MLP to 87%, and the GPU-like MLP with SGD to 87% and with Adam
to 89%. To make the two libraries: copy build/runtime/libdlrun_runtime.so.0 into a directory
after a build of each version. Only a change that leaves the public headers as they are can be
compared this way (the example is built once, against the headers of the build BUILD): a field
added to AdaptiveBatchOptions moves the others. For a change of the example's options, run the
example's own flags as two cases instead."""
import argparse
import os
import re
import shlex
import statistics
import subprocess
import sys
import tempfile
import time

GPU_LIKE = "--step-ms 10 --sample-ms 0.02 --sync-ms-per-rank 1"
CASES = {
    "cnn-88": "--model cnn --target-accuracy 0.88 --epochs 2 --eval-every 2500 --lr 4e-3",
    "mlp-87": "--model mlp --target-accuracy 0.87 --epochs 10 --eval-every 5000 --lr 1e-3",
    "gpu-like-sgd-87": f"--model mlp --optimizer sgd --target-accuracy 0.87 --epochs 15 --eval-every 5000 --lr 0.01 {GPU_LIKE}",
    "gpu-like-adam-89": f"--model mlp --target-accuracy 0.89 --epochs 30 --eval-every 5000 --lr 1e-3 {GPU_LIKE}",
}


def run(build, lib, args, scratch, count, timeout):
    run_dir = tempfile.mkdtemp(dir=scratch)
    cmd = [os.path.join(build, "cli", "dlrun"), "local", "--nproc", "2", "--run-dir", run_dir, "--",
           os.path.join(build, "examples", "fashion_mnist", "fashion_mnist"), "--adaptive", "--batch-size", "64",
           "--seed", "1"] + shlex.split(args)
    path = os.pathsep.join(p for p in (lib, os.environ.get("LD_LIBRARY_PATH", "")) if p)
    env = dict(os.environ, LD_LIBRARY_PATH=path, DLRUN_HOME=run_dir + "-home")
    try:
        out = subprocess.run(cmd, capture_output=True, text=True, env=env, timeout=timeout)
    except subprocess.TimeoutExpired as e:
        text = (e.stdout or b"").decode(errors="replace") if isinstance(e.stdout, bytes) else (e.stdout or "")
        return {"reached": False, "count": text.count(count), "tail": f"timed out after {timeout} s\n" + text[-600:]}
    text = out.stdout + out.stderr
    m = re.search(r"target reached: test_\w+=[\d.]+ after (\d+) samples, (\d+) steps, ([\d.]+) s", text)
    if out.returncode != 0 or not m:
        return {"reached": False, "count": text.count(count), "tail": text[-600:]}
    return {"reached": True, "samples": int(m.group(1)), "steps": int(m.group(2)), "seconds": float(m.group(3)),
            "count": text.count(count)}


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("build")
    ap.add_argument("--lib-a", required=True)
    ap.add_argument("--lib-b", required=True)
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--case", action="append", default=[], help="NAME=EXAMPLE ARGS (repeatable)")
    ap.add_argument("--count", default="adaptive batch: global",
                    help="count the lines of each run's log that hold this text (default: the batch's switches)")
    ap.add_argument("--timeout", type=float, default=600, help="seconds one run may take")
    args = ap.parse_args()
    for c in args.case:
        if "=" not in c:
            ap.error(f"--case {c!r}: write it as NAME=EXAMPLE ARGS")
    cases = dict(c.split("=", 1) for c in args.case) if args.case else CASES
    for lib in (args.lib_a, args.lib_b):
        if not os.path.exists(os.path.join(lib, "libdlrun_runtime.so.0")):
            sys.exit(f"no libdlrun_runtime.so.0 in {lib}")
    results = {(name, arm): [] for name in cases for arm in "ab"}
    with tempfile.TemporaryDirectory(prefix="dlrun-library-ab-") as scratch:
        for r in range(args.rounds):
            order = "ab" if r % 2 == 0 else "ba"
            for name, case_args in cases.items():
                for arm in order:
                    res = run(args.build, args.lib_a if arm == "a" else args.lib_b, case_args, scratch,
                              args.count, args.timeout)
                    results[(name, arm)].append(res)
                    shown = (f"{res['seconds']:.2f} s, {res['samples']} samples, {res['steps']} steps"
                             if res["reached"] else "not reached:\n" + res["tail"])
                    print(f"[{time.strftime('%H:%M:%S')}] round {r + 1} {name} {arm}: {shown}, "
                          f"{res['count']} log lines with {args.count!r}", flush=True)
    print(f"\n| case | a: seconds (median) | b: seconds (median) | b / a | a: samples | b: samples | "
          f"runs with {args.count!r}, a / b |")
    print("|---|---|---|---|---|---|---|")
    for name in cases:
        row = []
        for arm in "ab":
            runs = results[(name, arm)]
            secs = [x["seconds"] for x in runs if x["reached"]]
            samples = [x["samples"] for x in runs if x["reached"]]
            row.append((secs, samples, sum(1 for x in runs if x["count"] > 0), len(runs)))
        (sa, na, ca, ta), (sb, nb, cb, tb) = row

        def cell(secs, total):
            if not secs:
                return "none reached"
            missed = f", {total - len(secs)} not reached" if len(secs) < total else ""
            return f"{', '.join(f'{s:.2f}' for s in secs)} ({statistics.median(secs):.2f}{missed})"
        ratio = f"{statistics.median(sb) / statistics.median(sa):.3f}" if sa and sb else "-"
        med = lambda v: f"{statistics.median(v):,.0f}" if v else "-"
        print(f"| {name} | {cell(sa, ta)} | {cell(sb, tb)} | {ratio} | {med(na)} | {med(nb)} | {ca}/{ta}, {cb}/{tb} |")


if __name__ == "__main__":
    main()
