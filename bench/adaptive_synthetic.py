#!/usr/bin/env python3
"""Time to a target loss on the GPU-like synthetic program (examples/synthetic), 2 ranks
(dlrun local --nproc 2): dlrun::AdaptiveBatch against fixed global batches, each fixed batch at
the best learning rate of a sweep, the adaptive run from the best learning rate of its initial
batch (issue 15, point 3: a regime where larger batches pay).

The program sleeps a declared cost per step (--step-ms, a fixed part a larger batch amortises)
and per sample, and learns a noisy linear regression (--noise): the loss it can reach is the
noise's, and the closer the target is to it, the less gradient noise the last steps may carry.
Times are training time (the target checks excluded) and, since the cost is slept, hardly
depend on how busy the machine is.

Usage: bench/adaptive_synthetic.py BUILD_DIR [--target 16.345] [--sizes 64,256,1024,4096]
                                   [--lrs 0.01,0.02,0.05,0.1,0.2] [--passes 3] [--max-epochs 40]
                                   [--eval-every 1024] [--noise 4] [--samples 16384]
                                   [--step-ms 20] [--sample-ms 0.05] [--max-batch 4096[,...]]
                                   [--condition 1] [--scaling-rule adascale]

Prints one line per run and a Markdown table per pass; docs/benchmarks.md has the results."""
import argparse
import os
import re
import statistics
import subprocess
import sys
import tempfile

REACHED = re.compile(r"target reached: loss=([\d.]+) after (\d+) samples, (\d+) steps, ([\d.]+) s")


def run(args, work, extra):
    run_dir = tempfile.mkdtemp(dir=work)
    cmd = [os.path.join(args.build, "cli", "dlrun"), "local", "--quiet", "--nproc", "2", "--run-dir", run_dir, "--",
           os.path.join(args.build, "examples", "synthetic", "dlrun_synthetic"),
           "--noise", str(args.noise), "--samples", str(args.samples), "--epochs", str(args.max_epochs),
           "--target-loss", str(args.target), "--eval-every", str(args.eval_every),
           "--step-ms", str(args.step_ms), "--sample-ms", str(args.sample_ms), "--seed", "1",
           "--condition", str(args.condition)] + extra
    env = dict(os.environ, DLRUN_HOME=os.path.join(work, "home"))
    out = subprocess.run(cmd, capture_output=True, text=True, env=env)
    if out.returncode != 0:
        sys.exit(f"{' '.join(cmd)} failed ({out.returncode}):\n{out.stdout[-2000:]}{out.stderr[-2000:]}")
    m = REACHED.search(out.stdout)
    if not m:
        return None
    return {"seconds": float(m.group(4)), "samples": int(m.group(2)), "steps": int(m.group(3)),
            "batches": re.findall(r"global \d+ -> (\d+)", out.stdout)}


def one_pass(args, work):
    lrs = [float(v) for v in args.lrs.split(",")]
    best = {}
    for size in [int(v) for v in args.sizes.split(",")]:
        results = []
        for lr in lrs:
            r = run(args, work, ["--fixed", "--batch-size", str(size), "--lr", str(lr)])
            print(f"fixed {size} lr {lr}: {r['seconds'] if r else 'not reached'}", flush=True)
            if r:
                results.append((r["seconds"], lr, r))
        best[size] = min(results, key=lambda t: t[0]) if results else None
    initial = int(args.sizes.split(",")[0])
    if not best[initial]:
        sys.exit(f"fixed {initial} reached the target at no learning rate of the sweep")
    lr = best[initial][1]
    adaptive = {}
    for most in [int(v) for v in args.max_batch.split(",")]:
        r = run(args, work, ["--batch-size", str(initial), "--lr", str(lr), "--max-batch-size", str(most),
                             "--scaling-rule", args.scaling_rule])
        print(f"adaptive from {initial} to <= {most}, lr {lr}: {r['seconds'] if r else 'not reached'}"
              f" batches {r['batches'] if r else ''}", flush=True)
        adaptive[most] = r
    return best, lr, adaptive


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("build")
    ap.add_argument("--target", type=float, default=16.345)
    ap.add_argument("--sizes", default="64,256,1024,4096")
    ap.add_argument("--lrs", default="0.01,0.02,0.05,0.1,0.2")
    ap.add_argument("--passes", type=int, default=3)
    ap.add_argument("--max-epochs", type=int, default=40)
    ap.add_argument("--eval-every", type=int, default=1024)
    ap.add_argument("--noise", type=float, default=4)
    ap.add_argument("--samples", type=int, default=16384)
    ap.add_argument("--step-ms", type=float, default=20)
    ap.add_argument("--sample-ms", type=float, default=0.05)
    ap.add_argument("--max-batch", default="4096",
                    help="the adaptive run's largest batch; a list (1024,4096) runs one adaptive run per value")
    ap.add_argument("--condition", type=float, default=1,
                    help="the problem's curvature spread (examples/synthetic --condition): 1000 needs thousands of steps")
    ap.add_argument("--scaling-rule", default="adascale", help="the adaptive run's learning-rate rule")
    args = ap.parse_args()
    ratios = {}
    with tempfile.TemporaryDirectory() as work:
        for p in range(args.passes):
            best, lr, adaptive = one_pass(args, work)
            print(f"\npass {p + 1}: time to loss {args.target} (training s, best lr of {args.lrs})\n")
            print("| run | learning rate | time | samples | steps |")
            print("|---|---|---|---|---|")
            for size, b in best.items():
                if b:
                    print(f"| fixed {size} | {b[1]} | {b[0]:.2f} s | {b[2]['samples']} | {b[2]['steps']} |")
                else:
                    print(f"| fixed {size} | | not reached | | |")
            fastest = min((b[0] for b in best.values() if b), default=None)
            for most, r in adaptive.items():
                name = f"adaptive ({args.sizes.split(',')[0]} -> <= {most})"
                if r:
                    print(f"| {name} | {lr} at the start | {r['seconds']:.2f} s | {r['samples']} | {r['steps']} |")
                    if fastest:
                        ratios.setdefault(most, []).append(r["seconds"] / fastest)
                else:
                    print(f"| {name} | {lr} at the start | not reached | | |")
            print("", flush=True)
            for most, r in adaptive.items():
                if r and fastest:
                    print(f"adaptive (<= {most}) / best fixed: {r['seconds'] / fastest:.2f}")
                else:
                    print(f"adaptive (<= {most}) did not reach the target")
            print("", flush=True)
    for most, values in ratios.items():
        print(f"adaptive (<= {most}) / best fixed over {len(values)} passes that reached it: "
              f"{', '.join(f'{r:.2f}' for r in values)} (median {statistics.median(values):.2f})")
    return 0


if __name__ == "__main__":
    sys.exit(main())
