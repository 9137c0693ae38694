"""The job traces that replay.py runs on this machine and headroom.py bounds: one definition of
the kinds of job, their sizes and their order, shared by both scripts.

A trace is a list of (kind, size) in arrival order: KINDS[kind] is the synthetic program's
options, and size scales the job's data set (--samples), so a job of size 2 trains twice as
many samples as one of size 1 and takes about twice as long at any GPU count.

  uniform  the twelve jobs of ORDER, every one of size 1: jobs of one kind all alike
           (the trace of the first replays in docs/benchmarks.md);
  mixed    the same twelve jobs in the same order, but each kind's four jobs take the sizes
           1/2, 1/2, 1 and 2 (the same total work per kind), in the order of draw(MIXED_SEED).
           Real clusters' jobs differ in length by orders of magnitude (the Philly trace that
           Pollux replays); this is a mild version of it.

MIXED_SEED is not picked by the replay's result: it is the lower median, by the fluid model's
bound on the goodput objective against fifo-fixed, of the draws 0-29 (1.71x; the draws range
1.47-1.98x; `python3 bench/scheduler/headroom.py --draws 30` lists them all)."""
import random

GPUS = 8

# kind: (the fixed GPU count its user asks for under fifo-fixed, synthetic options at size 1,
# seconds alone on N fake GPUs at size 1: dlrun local on this machine, 2026-11-25; 3, 5, 6, 7
# interpolated).
KINDS = {
    # Large-batch friendly: noisy gradients (the batch grows), a per-sample cost that more GPUs
    # divide, cheap sync.
    "scalable": (4, ["--noise", "8", "--step-ms", "20", "--sample-ms", "0.6", "--sync-ms-per-rank", "1",
                     "--samples", "81920", "--epochs", "2"],
                 {1: 106, 2: 67, 3: 50, 4: 42, 5: 39, 6: 37, 7: 36, 8: 35}),
    # Sync-bound: little noise (the batch stays small), a fixed step cost, sync that grows with
    # the ranks: more than 2 GPUs make it slower.
    "sync-bound": (2, ["--noise", "0.5", "--step-ms", "40", "--sample-ms", "0.05", "--sync-ms-per-rank", "12",
                       "--samples", "49152", "--epochs", "1"],
                   {1: 36, 2: 47, 3: 60, 4: 74, 5: 85, 6: 97, 7: 110, 8: 121}),
    # In between.
    "medium": (2, ["--noise", "2", "--step-ms", "25", "--sample-ms", "0.25", "--sync-ms-per-rank", "3",
                   "--samples", "40960", "--epochs", "2"],
               {1: 56, 2: 33, 3: 29, 4: 27, 5: 27, 6: 28, 7: 29, 8: 30}),
}
# 12 jobs in arrival order.
ORDER = ["scalable", "sync-bound", "medium", "sync-bound", "scalable", "medium", "sync-bound", "medium", "scalable",
         "sync-bound", "medium", "scalable"]
# Each kind's jobs share these sizes out (ORDER has four of each kind).
SIZES = (0.5, 0.5, 1, 2)
MIXED_SEED = 21


def draw(seed):
    """ORDER with each kind's SIZES in a seeded random order."""
    rng = random.Random(seed)
    sizes = {kind: rng.sample(SIZES, len(SIZES)) for kind in KINDS}
    return [(kind, sizes[kind].pop()) for kind in ORDER]


TRACES = {"uniform": lambda: [(kind, 1) for kind in ORDER], "mixed": lambda: draw(MIXED_SEED)}


def fixed_gpus(kind):
    return KINDS[kind][0]


def options(kind, size):
    """The synthetic program's options for a job of this kind and size."""
    result = list(KINDS[kind][1])
    at = result.index("--samples") + 1
    result[at] = str(int(int(result[at]) * size))
    return result


def alone(kind, size, gpus):
    """Seconds the job takes alone on `gpus` GPUs (the measured curve, scaled by its size)."""
    return KINDS[kind][2][gpus] * size
