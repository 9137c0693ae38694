#!/usr/bin/env python3
"""How much lower an average job completion time (JCT) any GPU-sharing policy could reach on
bench/scheduler/replay.py's trace: a fluid model of the same 12 jobs on 8 GPUs, each job
progressing at 1 / (its time alone at its current GPU count) per second, re-allocated every
--dt seconds with no restart cost and perfect knowledge of every job's curve. It is an
optimistic bound for the real replay (no restarts, no measurement, no start-up), not a
measurement.

Policies: fifo-fixed (the replay's fixed sizes, in order), pollux (the goodput policy's
objective: speedup over the fair share, fairness p, never stopping a running job, waiting jobs
first, searched exactly), and srpt (the same constraints, but maximising the sum over jobs of
rate / remaining time alone on 1 GPU: shortest remaining work first, an oracle that knows every
job's remaining work, which dlrun's scheduler does not).

  python3 bench/scheduler/headroom.py [--every 5] [--fairness -1] [--dt 0.1]"""
import argparse
import math

GPUS = 8
# Seconds alone on N fake GPUs (dlrun local, this machine, 2026-11-25; 3, 5, 6, 7 interpolated).
ALONE = {
    "scalable": {1: 106, 2: 67, 3: 50, 4: 42, 5: 39, 6: 37, 7: 36, 8: 35},
    "sync-bound": {1: 36, 2: 47, 3: 60, 4: 74, 5: 85, 6: 97, 7: 110, 8: 121},
    "medium": {1: 56, 2: 33, 3: 29, 4: 27, 5: 27, 6: 28, 7: 29, 8: 30},
}
FIXED = {"scalable": 4, "sync-bound": 2, "medium": 2}  # replay.py's KINDS
TRACE = ["scalable", "sync-bound", "medium", "sync-bound", "scalable", "medium", "sync-bound", "medium", "scalable",
         "sync-bound", "medium", "scalable"]


def fifo_fixed(active):
    free = GPUS - sum(j["gpus"] for j in active)
    for j in active:
        if j["gpus"] == 0:
            if FIXED[j["kind"]] > free:
                break
            j["gpus"] = FIXED[j["kind"]]
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
            speedup = ALONE[j["kind"]][share] / ALONE[j["kind"]][a]
            return math.log(speedup) if p == 0 else (speedup ** p - 1) / p
        search(active, utility)
    return policy


def srpt(active):
    search(active, lambda j, a: (1 / ALONE[j["kind"]][a]) / max(1e-3, (1 - j["done"]) * ALONE[j["kind"]][1]))


def simulate(policy, every, dt):
    jobs = [{"kind": k, "arrival": i * every, "done": 0.0, "gpus": 0, "end": None} for i, k in enumerate(TRACE)]
    t = 0.0
    while any(j["end"] is None for j in jobs):
        active = [j for j in jobs if j["arrival"] <= t and j["end"] is None]
        if active:
            policy(active)
        for j in active:
            if j["gpus"]:
                j["done"] += dt / ALONE[j["kind"]][j["gpus"]]
                if j["done"] >= 1:
                    j["end"], j["gpus"] = t + dt, 0
        t += dt
    return [j["end"] - j["arrival"] for j in jobs]


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--every", type=float, default=5)
    ap.add_argument("--fairness", type=float, default=-1)
    ap.add_argument("--dt", type=float, default=0.1)
    args = ap.parse_args()
    results = {"fifo-fixed": simulate(fifo_fixed, args.every, args.dt),
               f"pollux (p = {args.fairness:g})": simulate(pollux(args.fairness), args.every, args.dt),
               "srpt (oracle)": simulate(srpt, args.every, args.dt)}
    base = sum(results["fifo-fixed"]) / len(TRACE)
    print("| policy (fluid model) | avg JCT | vs fifo-fixed | per job |")
    print("|---|---|---|---|")
    for name, jct in results.items():
        avg = sum(jct) / len(jct)
        print(f"| {name} | {avg:.1f} s | {base / avg:.2f}x | {' '.join(str(round(x)) for x in jct)} |")


if __name__ == "__main__":
    main()
