"""Wall-clock timing of whole commands for the benchmarks: median, min and max of runs."""
import statistics
import subprocess
import time


def time_runs(cmd, runs, env):
    """Runs cmd `runs` times; returns (median, min, max) seconds. Fails on a non-zero exit."""
    times = []
    for _ in range(runs):
        start = time.perf_counter()
        r = subprocess.run(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, env=env)
        times.append(time.perf_counter() - start)
        if r.returncode != 0:
            raise SystemExit(f"{' '.join(cmd)} failed ({r.returncode}): {r.stderr.decode()[-500:]}")
    return statistics.median(times), min(times), max(times)


def print_table(rows):
    print("| command | median | min | max |\n|---|---|---|---|")
    for name, (med, lo, hi) in rows:
        print(f"| `{name}` | {med * 1000:.1f} ms | {lo * 1000:.1f} ms | {hi * 1000:.1f} ms |")
