#!/usr/bin/env python3
"""Summarises scripts/gpu-bench.sh's section 4 (AdaptiveBatch held at one batch size against a
plain run, modes alternated in rounds): per model and mode, each run's median samples/s over the
epoch lines it printed, the median over the runs, and each mode's paired ratio to the fixed run
of the same round (median and range). A round is the modes in the order they alternate (any
order; a mode seen again begins the next round); a run without epoch lines is left out and
counted.

Usage: bench/overhead_rounds.py FILE    (FILE: lines '-- MODEL MODE' each followed by the run's
                                         '[0] epoch E/N: ..., S samples/s' lines)"""
import re
import statistics
import sys


def runs(lines):
    """[(model, mode, [samples/s per epoch line])] in the order they ran; a run that printed no
    epoch line (it timed out or failed) keeps its place with an empty list."""
    out = []
    for line in lines:
        head = re.match(r"-- (\S+) (\S+)\s*$", line)
        if head:
            out.append((head.group(1), head.group(2), []))
            continue
        epoch = re.search(r"epoch \d+/\d+:.* (\d+) samples/s", line)
        if epoch and out:
            out[-1][2].append(int(epoch.group(1)))
    return out


def summary(lines):
    rows = []
    by_model = {}
    for model, mode, values in runs(lines):
        by_model.setdefault(model, []).append((mode, statistics.median(values) if values else None))
    for model, entries in by_model.items():
        modes = list(dict.fromkeys(mode for mode, _ in entries))
        # A round: the modes in the order they alternate; a mode seen again begins the next.
        rounds, current = [], {}
        for mode, value in entries:
            if mode in current:
                rounds.append(current)
                current = {}
            current[mode] = value
        if current:
            rounds.append(current)
        for mode in modes:
            values = [r[mode] for r in rounds if r.get(mode) is not None]
            failed = sum(1 for r in rounds if mode in r and r[mode] is None)
            if not values:
                rows.append(f"{model} {mode}: no run printed an epoch line")
                continue
            line = f"{model} {mode}: runs {', '.join(f'{v:,.0f}' for v in values)}; median {statistics.median(values):,.0f}"
            ratios = [r[mode] / r["fixed"] for r in rounds
                      if r.get(mode) is not None and r.get("fixed") is not None]
            if mode != "fixed" and ratios:
                line += (f"; ÷ fixed of its round: median {statistics.median(ratios):.3f} "
                         f"({min(ratios):.3f}–{max(ratios):.3f}, {len(ratios)} rounds)")
            if failed:
                line += f"; {failed} run(s) without an epoch line left out"
            rows.append(line)
    return rows


if __name__ == "__main__":
    if len(sys.argv) != 2:
        sys.exit(__doc__)
    with open(sys.argv[1]) as f:
        print("\n".join(summary(f.read().splitlines())) or "no runs found")
