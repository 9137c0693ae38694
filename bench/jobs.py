#!/usr/bin/env python3
"""Job queue latency: `dlrun status` with 10,000 jobs in the history, and `dlrun submit`.
Prints a Markdown table (median of repeated runs). Usage: bench/jobs.py DLRUN [--runs K]"""
import argparse
import os
import shutil
import sqlite3
import subprocess

import tempfile
import time

from timing import print_table, time_runs


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("dlrun")
    parser.add_argument("--runs", type=int, default=21)
    parser.add_argument("--history", type=int, default=10000)
    args = parser.parse_args()
    home = tempfile.mkdtemp(prefix="dlrun-bench-jobs-")
    env = dict(os.environ, DLRUN_HOME=home, DLRUN_CPU_SLOTS="64")
    try:
        subprocess.run([args.dlrun, "status"], env=env, check=True, stdout=subprocess.DEVNULL)  # creates jobs.db
        db = sqlite3.connect(os.path.join(home, "jobs.db"))
        now = time.time()
        db.executemany(
            "INSERT INTO jobs (name, state, spec_text, spec_path, base_dir, environment, uses_gpus, min_ranks, "
            "max_ranks, ranks, submitted_at, started_at, ended_at, exit_code, run_dir) "
            "VALUES (?, ?, 'command = [\"true\"]', '/j/job.toml', '/j', x'', 0, 2, 2, 2, ?, ?, ?, ?, ?)",
            [(f"job-{i}", "SUCCEEDED" if i % 10 else "FAILED", now - 9e5 + i, now - 9e5 + i + 1,
              now - 9e5 + i + 60, 0 if i % 10 else 1, f"{home}/jobs/{i}") for i in range(args.history)])
        db.commit()
        db.close()
        job = os.path.join(home, "job.toml")
        with open(job, "w") as f:
            f.write('name = "bench"\ncommand = ["true"]\n[resources]\nnproc = 1\n')
        rows = [
            (f"dlrun status ({args.history} jobs in history)", time_runs([args.dlrun, "status"], args.runs, env)),
            (f"dlrun status --all --json ({args.history} jobs)", time_runs([args.dlrun, "status", "--all", "--json"], 5, env)),
            ("dlrun submit job.toml", time_runs([args.dlrun, "submit", "--parsable", job], args.runs, env)),
        ]
        time.sleep(3)  # let the submitted jobs finish before the directory goes
        print_table(rows)
    finally:
        shutil.rmtree(home, ignore_errors=True)


if __name__ == "__main__":
    main()
