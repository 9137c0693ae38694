#!/usr/bin/env python3
"""The most an adaptive batch can gain over the best fixed batch, in AdaptiveBatch's own model.

Issue 15, point 3 asks for an adaptive run in <= 0.9x the time of the best fixed batch. This
script asks how much any batch schedule could gain, with perfect knowledge, no overhead and
instant switches, under the model AdaptiveBatch decides by (docs/adaptive.md): a step at global
batch B costs c + s*B seconds, and makes (B / B0) * E(B) units of progress, where

    E(B) = ((phi + B0) / (phi + B)) ** p      (p = 1 for SGD, Pollux; p = 1/2 for Adam)

phi being the gradient noise scale where the run is. The time per unit of progress at B is
(c + s*B) * B0 / (B * E(B)); an oracle takes the best B at every point of the run, the best
fixed batch the single B with the least total. Their ratio bounds what AdaptiveBatch can reach:
its decisions, its measurements and its 2x growth limit only add to the oracle's time.

Two modes:

  adaptive_bound.py table
      the bound for a noise scale that grows geometrically by K over the run (evenly in
      progress), for several K and for per-step costs c/s = B_c relative to the first phi;
  adaptive_bound.py run RUN_DIR/metrics.jsonl ... --step-ms C --sample-us S
      the bound along the noise scale a real run measured (its metrics.jsonl, one line every
      log_every steps and one before each switch), each line weighted by the progress made
      since the one before.

Pure arithmetic: no timing, deterministic.
"""
import argparse
import json
import math
import sys


def efficiency(phi, b0, b, power):
    return ((phi + b0) / (phi + b)) ** power


def seconds_per_progress(phi, b, b0, step_s, sample_s, power):
    return (step_s + sample_s * b) * b0 / (b * efficiency(phi, b0, b, power))


def batch_grid(b0, b_max, per_octave=16):
    grid, b = [], float(b0)
    while b <= b_max * (1 + 1e-9):
        grid.append(b)
        b *= 2 ** (1 / per_octave)
    return grid


def bound(phases, b0, b_max, step_s, sample_s, power):
    """phases: [(weight, phi)]. Returns (oracle / best fixed, best fixed batch, the oracle's
    smallest and largest batch). The oracle, like AdaptiveBatch, never goes below b0."""
    grid = batch_grid(b0, b_max)
    total = sum(w for w, _ in phases)
    cost = [[w / total * seconds_per_progress(phi, b, b0, step_s, sample_s, power) for b in grid]
            for w, phi in phases]
    oracle = sum(min(row) for row in cost)
    fixed = [sum(row[i] for row in cost) for i in range(len(grid))]
    best = min(range(len(grid)), key=fixed.__getitem__)
    chosen = [grid[min(range(len(grid)), key=row.__getitem__)] for row in cost]
    return oracle / fixed[best], grid[best], min(chosen), max(chosen)


def geometric_phases(growth, phi0=1.0, phases=200):
    return [(1.0, phi0 * growth ** ((i + 0.5) / phases)) for i in range(phases)]


def table(args):
    power = 0.5 if args.efficiency == "adam" else 1.0
    print(f"oracle / best fixed batch ({args.efficiency} efficiency; the noise scale grows "
          f"by K over the run, evenly in progress; B_c = c/s, the batch at which a step's "
          f"fixed cost equals its per-sample cost; B0 = the first noise scale / 2, at most "
          f"{args.max_batch:g} x B0)")
    growths = [float(k) for k in args.growths.split(",")]
    print("| B_c / first noise scale | " + " | ".join(f"K = {k:g}" for k in growths) + " |")
    print("|---|" + "---|" * len(growths))
    for ratio in [float(r) for r in args.bc_ratios.split(",")]:
        phi0 = 1.0
        b0 = phi0 / 2
        cells = []
        for k in growths:
            r, _, _, _ = bound(geometric_phases(k, phi0), b0, args.max_batch * b0, ratio * phi0,
                               1.0, power)
            cells.append(f"{r:.3f}")
        print(f"| {ratio:g} | " + " | ".join(cells) + " |")


def run(args):
    power = 0.5 if args.efficiency == "adam" else 1.0
    for path in args.metrics:
        try:
            with open(path) as f:
                rows = [json.loads(line) for line in f if line.strip()]
        except (OSError, ValueError) as e:
            sys.exit(f"adaptive_bound: {path}: {e}")
        rows = [r for r in rows if r.get("noise_scale", 0) > 0]
        if not rows:
            sys.exit(f"adaptive_bound: {path}: no line with a noise scale")
        b0 = args.initial_batch or rows[0]["global_batch"]
        # Each line's noise scale stands for the progress made since the line before (a line
        # without one adds its progress to the next).
        phases, last_progress = [], 0.0
        for r in rows:
            weight = r["progress"] - last_progress
            last_progress = r["progress"]
            if weight > 0:
                phases.append((weight, r["noise_scale"]))
        phis = sorted(phi for _, phi in phases)
        pct = lambda q: phis[min(len(phis) - 1, int(q * len(phis)))]  # over lines, unweighted
        r, best, smallest, largest = bound(phases, b0, args.max_batch, args.step_ms / 1e3,
                                     args.sample_us / 1e6, power)
        print(f"{path}: {len(phases)} points, noise scale {phis[0]:.0f}-{phis[-1]:.0f} "
              f"(10th-90th percentile {pct(0.1):.0f}-{pct(0.9):.0f}); best fixed batch {best:.0f}, "
              f"the oracle's {smallest:.0f}-{largest:.0f}: oracle / best fixed {r:.3f}")


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--efficiency", choices=["sgd", "adam"], default="sgd")
    sub = p.add_subparsers(dest="mode", required=True)
    t = sub.add_parser("table", help="the bound for a noise scale that grows K-fold")
    t.add_argument("--growths", default="1,2,4,10,30,100,1000")
    t.add_argument("--bc-ratios", default="0.1,1,10,100")
    t.add_argument("--max-batch", type=float, default=1e5, help="the largest batch, in units of B0")
    r = sub.add_parser("run", help="the bound along a run's measured noise scale")
    r.add_argument("metrics", nargs="+", help="metrics.jsonl of an adaptive run")
    r.add_argument("--step-ms", type=float, required=True, help="fixed seconds of a step, in ms")
    r.add_argument("--sample-us", type=float, required=True,
                   help="seconds per sample of the global batch, in microseconds")
    r.add_argument("--initial-batch", type=float, default=0,
                   help="B0 (default: the batch of the run's first line with a noise scale)")
    r.add_argument("--max-batch", type=float, default=4096, help="the largest global batch")
    args = p.parse_args()
    table(args) if args.mode == "table" else run(args)


if __name__ == "__main__":
    main()
