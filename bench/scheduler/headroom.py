#!/usr/bin/env python3
"""How much lower an average job completion time (JCT) any GPU-sharing policy could reach on
one of bench/scheduler/replay.py's traces (workload.py): a fluid model of the same 12 jobs on 8
GPUs, each job progressing at 1 / (its time alone at its current GPU count) per second,
re-allocated every --dt seconds with no restart cost and perfect knowledge of every job's
curve. It is an optimistic bound for the real replay (no restarts, no measurement, no
start-up), not a measurement.

Policies: fifo-fixed (the replay's fixed sizes, in order), pollux (the goodput policy's
objective: speedup over the fair share, fairness p, never stopping a running job, waiting jobs
first, searched exactly), and srpt (the same constraints, but maximising the sum over jobs of
rate / remaining time alone on 1 GPU: shortest remaining work first, an oracle that knows every
job's remaining work, which dlrun's scheduler does not).

  python3 bench/scheduler/headroom.py [--trace mixed|uniform] [--every 5] [--fairness -1] [--dt 0.1]
  python3 bench/scheduler/headroom.py --draws 30    # the bound over workload.draw(0..29)"""
import argparse
import math
import statistics

from workload import GPUS, MIXED_SEED, TRACES, alone, draw, fixed_gpus


def fifo_fixed(active):
    free = GPUS - sum(j["gpus"] for j in active)
    for j in active:
        if j["gpus"] == 0:
            if fixed_gpus(j["kind"]) > free:
                break
            j["gpus"] = fixed_gpus(j["kind"])
            free -= j["gpus"]


def search(active, term):
    """Exact DP over jobs x GPUs: fewest waiting jobs first, then the largest sum of term(job, gpus)."""
    best = {0: ((0, 0.0), [])}
    for j in active:
        options = range(1, GPUS + 1) if j["gpus"] > 0 else range(0, GPUS + 1)
        nxt = {}
        for used, (score, alloc) in best.items():
            for a in options:
                if used + a > GPUS:
                    continue
                s = (score[0] - (a == 0), score[1] + (term(j, a) if a else 0.0))
                if used + a not in nxt or s > nxt[used + a][0]:
                    nxt[used + a] = (s, alloc + [a])
        best = nxt
    for a, j in zip(max(best.values())[1], active):
        j["gpus"] = a


def pollux(p):
    def policy(active):
        share = max(1, GPUS // len(active))

        def utility(j, a):
            speedup = alone(j["kind"], j["size"], share) / alone(j["kind"], j["size"], a)
            return math.log(speedup) if p == 0 else (speedup ** p - 1) / p
        search(active, utility)
    return policy


def srpt(active):
    search(active, lambda j, a: (1 / alone(j["kind"], j["size"], a)) /
           max(1e-3, (1 - j["done"]) * alone(j["kind"], j["size"], 1)))


def simulate(policy, trace, every, dt):
    jobs = [{"kind": k, "size": s, "arrival": i * every, "done": 0.0, "gpus": 0, "end": None}
            for i, (k, s) in enumerate(trace)]
    t = 0.0
    while any(j["end"] is None for j in jobs):
        active = [j for j in jobs if j["arrival"] <= t and j["end"] is None]
        if active:
            policy(active)
        for j in active:
            if j["gpus"]:
                j["done"] += dt / alone(j["kind"], j["size"], j["gpus"])
                if j["done"] >= 1:
                    j["end"], j["gpus"] = t + dt, 0
        t += dt
    return [j["end"] - j["arrival"] for j in jobs]


def average(jct):
    return sum(jct) / len(jct)


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--trace", choices=sorted(TRACES), default="mixed")
    ap.add_argument("--every", type=float, default=5)
    ap.add_argument("--fairness", type=float, default=-1)
    ap.add_argument("--dt", type=float, default=0.1)
    ap.add_argument("--draws", type=int, default=0,
                    help="instead: the goodput objective's bound on workload.draw(0 .. N-1), sorted")
    args = ap.parse_args()
    if args.draws:
        bounds = []
        for seed in range(args.draws):
            trace = draw(seed)
            bound = average(simulate(fifo_fixed, trace, args.every, args.dt)) / average(
                simulate(pollux(args.fairness), trace, args.every, args.dt))
            bounds.append((bound, seed))
        print("| seed | sizes in arrival order | pollux vs fifo-fixed |")
        print("|---|---|---|")
        for bound, seed in sorted(bounds):
            mark = " (MIXED_SEED)" if seed == MIXED_SEED else ""
            print(f"| {seed}{mark} | {' '.join(f'{s:g}' for _, s in draw(seed))} | {bound:.2f}x |")
        print(f"\nmedian {statistics.median(b for b, _ in bounds):.2f}x, lower median: seed "
              f"{sorted(bounds)[(len(bounds) - 1) // 2][1]}")
        return
    trace = TRACES[args.trace]()
    results = {"fifo-fixed": simulate(fifo_fixed, trace, args.every, args.dt),
               f"pollux (p = {args.fairness:g})": simulate(pollux(args.fairness), trace, args.every, args.dt),
               "srpt (oracle)": simulate(srpt, trace, args.every, args.dt)}
    base = average(results["fifo-fixed"])
    print(f"trace {args.trace}: " + " ".join(f"{k}x{s:g}" for k, s in trace) + "\n")
    print("| policy (fluid model) | avg JCT | vs fifo-fixed | per job |")
    print("|---|---|---|---|")
    for name, jct in results.items():
        print(f"| {name} | {average(jct):.1f} s | {base / average(jct):.2f}x | {' '.join(str(round(x)) for x in jct)} |")


if __name__ == "__main__":
    main()
