#!/usr/bin/env python3
"""What claiming GPUs machine-wide costs a `dlrun local --gpus 1` (docs/local.md, "GPUs shared
with other users"): the same run with claims on (DLRUN_GPU_CLAIMS_DIR set) and off, alternated,
on pretend GPUs. `OTHER` claims held by a second store's job make the look at them do work.

    python3 bench/gpu_claims.py build [--runs 20] [--other 1]
"""
import argparse
import os
import shutil
import signal
import statistics
import subprocess
import tempfile
import time


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("build", help="the build directory (its cli/dlrun is timed)")
    parser.add_argument("--runs", type=int, default=20, help="runs of each arm (default 20)")
    parser.add_argument("--other", type=int, default=1, help="GPUs another store's job holds meanwhile (default 1)")
    args = parser.parse_args()
    dlrun = os.path.join(args.build, "cli", "dlrun")
    tmp = tempfile.mkdtemp(prefix="dlrun-claims-bench-")
    gpus = args.other + 1
    base = dict(os.environ, DLRUN_HOME=os.path.join(tmp, "home"), DLRUN_FAKE_GPUS=str(gpus), NO_COLOR="1")
    base.pop("DLRUN_GPU_CLAIMS_DIR", None)
    on = dict(base, DLRUN_GPU_CLAIMS_DIR=os.path.join(tmp, "claims"))
    holder = None
    try:
        if args.other:
            up = os.path.join(tmp, "up")
            holder = subprocess.Popen([dlrun, "local", "-q", "--gpus", str(args.other), "sh", "-c",
                                       f"touch {up}; exec sleep 3600"],
                                      env=dict(on, DLRUN_HOME=os.path.join(tmp, "other")), start_new_session=True,
                                      stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
            while not os.path.exists(up):
                time.sleep(0.05)
        times = {"claims off": [], "claims on": []}
        for _ in range(args.runs):
            for name, env in (("claims off", base), ("claims on", on)):
                start = time.perf_counter()
                # Off, the other job's GPUs are unknown: ask for one that is free either way.
                r = subprocess.run([dlrun, "local", "-q", "--gpus", "device=%d" % args.other if name == "claims off"
                                    else "1", "true"], env=env, capture_output=True, text=True)
                times[name].append(time.perf_counter() - start)
                if r.returncode != 0:
                    raise SystemExit(f"{name}: dlrun exited {r.returncode}: {r.stderr}")
        for name, values in times.items():
            q = statistics.quantiles(values, n=4)
            print(f"{name}: median {1000 * statistics.median(values):.1f} ms "
                  f"(quartiles {1000 * q[0]:.1f}-{1000 * q[2]:.1f} ms, {len(values)} runs)")
    finally:
        if holder:
            os.killpg(holder.pid, signal.SIGTERM)
            holder.wait()
        shutil.rmtree(tmp, ignore_errors=True)


if __name__ == "__main__":
    main()
