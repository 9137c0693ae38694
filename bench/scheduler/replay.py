#!/usr/bin/env python3
"""Replays a job trace on this machine, with fake GPUs, under three ways of sharing them,
and reports average and p95 job completion time (JCT), makespan and GPU utilisation:

  fifo-fixed   each job asks for a fixed number of GPUs and the queue starts them in order
               (policy = "fifo", gpus = N): N is what each kind's user asks for (workload.py), or with
               fifo-fixed:N the same N for every job;
  fifo-greedy  each job is elastic (gpus = "1:8") and takes every free GPU when it starts,
               keeping them to its end (policy = "fifo": dlrun before the goodput scheduler);
  goodput      the same elastic jobs, shared by the goodput scheduler (policy = "goodput").

The jobs are examples/synthetic (real runtime jobs: AdaptiveBatch, checkpoints, exact resume)
whose steps sleep a GPU-like cost, so that 8 fake GPUs fit on 2 cores. Three kinds differ in
scalability and gradient noise, and the jobs of the mixed trace (the default) in length too
(workload.py). One job arrives every --every seconds (5).

  python3 bench/scheduler/replay.py [--policies goodput,fifo-greedy,fifo-fixed,fifo-fixed:4] [--out DIR]
                                    [--trace mixed|uniform] [--every SECONDS] [--fairness P]
                                    [--restart-seconds R]

Writes DIR/POLICY.svg and DIR/POLICY.txt (dlrun status --svg / --trace) and prints a
Markdown table. docs/benchmarks.md has the results."""
import argparse
import json
import os
import shutil
import sqlite3
import statistics
import subprocess
import sys
import time

from workload import GPUS, TRACES, fixed_gpus, options

ROOT = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", ".."))
BUILD = os.environ.get("DLRUN_BUILD_DIR", os.path.join(ROOT, "build"))
DLRUN = os.path.join(BUILD, "cli", "dlrun")
SYNTHETIC = os.path.join(BUILD, "examples", "synthetic", "dlrun_synthetic")


def dlrun(env, *args):
    return subprocess.run([DLRUN, *args], env=env, capture_output=True, text=True, check=True).stdout


def job_file(directory, index, kind, size, policy):
    fixed = fixed_gpus(kind)
    if policy.startswith("fifo-fixed:"):
        fixed = int(policy.split(":")[1])
    gpus = str(fixed) if policy.startswith("fifo-fixed") else '"1:8"'
    share = "goodput" if policy == "goodput" else "fifo"
    command = json.dumps([SYNTHETIC, "--seed", str(index + 1), "--batch-size", "64", "--max-batch-size", "2048",
                          "--replan-every", "20", "--count-progress", *options(kind, size)])
    path = os.path.join(directory, f"job{index:02d}-{kind}-x{size:g}.toml")
    with open(path, "w") as f:
        f.write(f'name = "{kind}-{index}"\ncommand = {command}\ngrace = 30\n'
                f'[scheduler]\npolicy = "{share}"\n[resources]\ngpus = {gpus}\n')
    return path


def utilisation(home, begin, end):
    """Busy GPU-seconds / (GPUs x (end - begin)) from the store's allocation history."""
    with sqlite3.connect(os.path.join(home, "jobs.db")) as db:
        events = db.execute("SELECT job, at, ranks FROM allocations ORDER BY seq").fetchall()
    held, last, busy = {}, {}, 0.0
    for job, at, ranks in events:
        if job in held:
            busy += held[job] * (at - last[job])
        held[job], last[job] = ranks, at
    for job, ranks in held.items():
        busy += ranks * (end - last[job])
    return busy / (GPUS * (end - begin))


def replay(policy, trace, out, every, fairness, restart_seconds):
    home = f"/tmp/dlrun-replay-{policy.replace(':', '-')}"
    shutil.rmtree(home, ignore_errors=True)
    os.makedirs(home)
    with open(os.path.join(home, "config.toml"), "w") as f:
        f.write(f"[scheduler]\nrestart_seconds = {restart_seconds}\ninterval_seconds = 30\nfairness = {fairness}\n")
    env = dict(os.environ, DLRUN_HOME=home, DLRUN_FAKE_GPUS=str(GPUS), NO_COLOR="1")
    jobs_dir = os.path.join(home, "job-files")
    os.makedirs(jobs_dir)
    start = time.time()
    ids = []
    for index, (kind, size) in enumerate(trace):
        time.sleep(max(0.0, start + index * every - time.time()))
        ids.append(int(dlrun(env, "submit", "--parsable", job_file(jobs_dir, index, kind, size, policy))))
    while True:
        jobs = json.loads(dlrun(env, "status", "--json", "--all"))
        if all(j["state"] in ("SUCCEEDED", "FAILED", "CANCELLED") for j in jobs):
            break
        time.sleep(2)
    failed = [j for j in jobs if j["state"] != "SUCCEEDED"]
    with sqlite3.connect(os.path.join(home, "jobs.db")) as db:
        times = db.execute("SELECT submitted_at, ended_at FROM jobs ORDER BY id").fetchall()
    jct = [end - submitted for submitted, end in times]
    begin, end = min(t[0] for t in times), max(t[1] for t in times)
    name = policy.replace(":", "-")
    with open(os.path.join(out, f"{name}.txt"), "w") as f:
        f.write(dlrun(env, "status", "--trace", "--width", "100"))
    dlrun(env, "status", "--svg", os.path.join(out, f"{name}.svg"))
    return {
        "policy": policy,
        "failed": len(failed),
        "avg_jct": statistics.mean(jct),
        "p95_jct": sorted(jct)[max(0, int(round(0.95 * len(jct))) - 1)],
        "makespan": end - begin,
        "utilisation": utilisation(home, begin, end),
        "jct": jct,
    }


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--policies", default="goodput,fifo-greedy,fifo-fixed")
    parser.add_argument("--trace", choices=sorted(TRACES), default="mixed", help="workload.py's traces (mixed)")
    parser.add_argument("--out", default="/tmp/dlrun-replay")
    parser.add_argument("--every", type=float, default=5, help="seconds between two arrivals")
    parser.add_argument("--fairness", type=float, default=-1, help="the goodput policy's fairness p")
    parser.add_argument("--restart-seconds", type=float, default=10, help="the goodput policy's restart penalty R")
    args = parser.parse_args()
    os.makedirs(args.out, exist_ok=True)
    results = []
    for policy in args.policies.split(","):
        result = replay(policy, TRACES[args.trace](), args.out, args.every, args.fairness, args.restart_seconds)
        results.append(result)
        print(json.dumps(result), flush=True)
    base = {r["policy"]: r for r in results}
    print("\n| policy | avg JCT (s) | p95 JCT (s) | makespan (s) | GPU utilisation | failed |")
    print("|---|---|---|---|---|---|")
    for r in results:
        print(f"| {r['policy']} | {r['avg_jct']:.0f} | {r['p95_jct']:.0f} | {r['makespan']:.0f} | "
              f"{100 * r['utilisation']:.0f}% | {r['failed']} |")
    if "goodput" in base:
        for other in base:
            if other != "goodput":
                print(f"\ngoodput's average JCT is {base[other]['avg_jct'] / base['goodput']['avg_jct']:.2f}x lower "
                      f"than {other}'s")
    return 0


if __name__ == "__main__":
    sys.exit(main())
