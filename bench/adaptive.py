#!/usr/bin/env python3
"""Time to a target test accuracy on Fashion-MNIST with 2 ranks (dlrun local --nproc 2, or --gpus N):
dlrun::AdaptiveBatch (--adaptive, starting at batch 64) against fixed global batch sizes,
each fixed size with its scaled learning rate (lr 2e-3 at 64 scaled linearly, or by the square
root with --lr-scaling sqrt; 0.02 with --optimizer sgd), same model and seed.

Each run stops as soon as the test accuracy, checked every --eval-every samples, reaches the
target; the time reported is training time (optimizer steps, without the accuracy checks),
and the samples are those trained on until then. A run that does not reach the target within
--max-epochs is reported as such. After the table, `dlrun history` says what the adaptive run
decided; with --svg FILE it also draws it (batch size, goodput and noise scale over time).

Usage: bench/adaptive.py BUILD_DIR [--target 0.88 | --target-loss 0.32] [--sizes 64,256,1024,4096]
                                   [--max-epochs 8] [--eval-every 10000] [--base-lr LR]
                                   [--model cnn|mlp] [--optimizer adam|sgd] [--lr-factors 0.5,1,2]
                                   [--lr-scaling linear|sqrt]
                                   [--with python,torchrun]
                                   [--step-ms MS --sample-ms MS --sync-ms-per-rank MS]
                                   [--scaling-rule RULE] [--svg FILE] [--adaptive-lrs best,1e-3]
                                   [--gpus N] [--adaptive-variant=OPTIONS]...

--gpus N runs every program on N GPUs (dlrun local --gpus N; torchrun's DDP with --device cuda, NCCL)
instead of 2 CPU ranks. TORCHRUN (a command, default ../shared/bench/torchrun-debian) and PYTHON
(default /usr/bin/python3, the Python with torch) say which torchrun and python3 to run.

--target-loss L times each run to a test loss (the test set's mean cross-entropy) of at most L
instead of a test accuracy: a smoother measure than the accuracy near a model's plateau, and one
where a batch that grows (a lower noise floor, docs/adaptive.md) shows. --adaptive-lrs runs the
adaptive job once per initial learning rate ('best': fixed 64's best, the default).

--with torchrun adds the same sweep of fixed sizes in PyTorch DDP under torchrun
(bench/python/ddp_train.py: the same model, optimizer, seed and accuracy checks), and --with python
the adaptive run through `import dlrun` (examples/python_adaptive), side by side in one run.

--step-ms, --sample-ms and --sync-ms-per-rank make every run (C++ and torchrun) sleep a GPU-like
cost on top of its real compute: a fixed part per step that larger batches amortise, as on a GPU
(examples/fashion_mnist --step-ms; the Python adaptive run has no such option).

--optimizer sgd trains every run with SGD (momentum 0.9) instead of Adam; the adaptive run then
scales its rate by AdaScale's gain.

--base-lr is the optimizer's learning rate at batch 64 (default 2e-3 for Adam, 0.02 for SGD);
fixed sizes scale it linearly (or by the square root of size / 64 with --lr-scaling sqrt, the
centre that suits Adam's sweep) and then try each of --lr-factors; --adaptive starts from the
best of fixed 64 (AdaptDL assumes the learning rate is tuned for the initial batch)."""
import argparse
import json
import os
import re
import shlex
import subprocess
import sys
import tempfile
import time

BASE_LRS, BASE_BATCH = {"adam": 2e-3, "sgd": 0.02}, 64


HERE = os.path.dirname(os.path.abspath(__file__))
TORCHRUN = shlex.split(os.environ.get("TORCHRUN", shlex.quote(os.path.join(HERE, "..", "..", "shared", "bench",
                                                                          "torchrun-debian"))))
PYTHON = os.environ.get("PYTHON", "/usr/bin/python3")


def run(build, run_dir, extra, args, program="cpp"):
    """One run to the target: program 'cpp' (examples/fashion_mnist under dlrun local), 'python'
    (examples/python_adaptive: import dlrun, under dlrun local) or 'torchrun' (PyTorch DDP,
    bench/python/ddp_train.py under torchrun)."""
    target = ["--target-test-loss", str(args.target_loss)] if args.target_loss else ["--target-accuracy", str(args.target)]
    common = ["--epochs", str(args.max_epochs)] + target + [
              "--eval-every", str(args.eval_every), "--seed", "1", "--model", args.model] + optimizer_args(args) + cost_args(args) + extra
    ranks = ["--gpus", str(args.gpus)] if args.gpus else ["--nproc", "2"]
    dlrun = [os.path.join(build, "cli", "dlrun"), "local"] + ranks + ["--run-dir", run_dir, "--"]
    if program == "cpp":
        cmd = dlrun + [os.path.join(build, "examples", "fashion_mnist", "fashion_mnist")] + common
    elif program == "python":
        cmd = dlrun + [PYTHON, os.path.join(HERE, "..", "examples", "python_adaptive", "train.py"),
                       "--checkpoint-dir", run_dir + "-checkpoints"] + common
    else:
        cmd = TORCHRUN + ["--nproc_per_node", str(args.gpus or 2), "--monitor_interval", "0.1",
                          os.path.join(HERE, "python", "ddp_train.py")] + common + \
            (["--device", "cuda"] if args.gpus else [])
    start = time.monotonic()
    env = dict(os.environ, DLRUN_HOME=run_dir + "-home", PYTHONPATH=os.path.join(build, "python"))
    out = subprocess.run(cmd, capture_output=True, text=True, env=env)
    wall = time.monotonic() - start
    if out.returncode != 0:
        sys.exit(f"{' '.join(cmd)} failed ({out.returncode}):\n{out.stdout[-2000:]}{out.stderr[-2000:]}")
    m = re.search(r"target reached: test_(accuracy|loss)=([\d.]+) after (\d+) samples, (\d+) steps, ([\d.]+) s",
                  out.stdout)
    final = re.search(r"test_accuracy=([\d.]+)\s*$", out.stdout)
    if not m:
        return {"reached": False, "wall": wall, "accuracy": float(final.group(1)) if final else None}
    return {"reached": True, m.group(1): float(m.group(2)), "samples": int(m.group(3)),
            "steps": int(m.group(4)), "seconds": float(m.group(5)), "wall": wall}


def optimizer_args(args):
    """The optimizer every run trains with (nothing for the programs' default, Adam)."""
    return ["--optimizer", args.optimizer] if args.optimizer != "adam" else []


def cost_args(args):
    """The GPU-like cost every run sleeps (nothing when none was asked for)."""
    cost = [("--step-ms", args.step_ms), ("--sample-ms", args.sample_ms), ("--sync-ms-per-rank", args.sync_ms_per_rank)]
    return [a for name, value in cost if value for a in (name, f"{value:g}")]


def history(build, run_dir, svg_path):
    """What the adaptive run decided, as `dlrun history` tells it (and draws it with --svg)."""
    cmd = [os.path.join(build, "cli", "dlrun"), "history", run_dir] + (["--svg", svg_path] if svg_path else [])
    out = subprocess.run(cmd, capture_output=True, text=True)
    if out.returncode != 0:  # the table still prints: the runs' results are not lost to it
        return f"{' '.join(cmd)} failed ({out.returncode}):\n{out.stdout}{out.stderr}"
    return out.stdout


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("build")
    ap.add_argument("--target", type=float, default=0.88, help="the test accuracy to reach")
    ap.add_argument("--target-loss", type=float, default=0,
                    help="instead of --target: the test set's mean cross-entropy to reach (at most)")
    ap.add_argument("--adaptive-lrs", default="",
                    help="the adaptive run's initial learning rates, one run each; 'best' is fixed 64's best "
                         "(the default), e.g. best,1e-3")
    ap.add_argument("--sizes", default="64,256,1024,4096")
    ap.add_argument("--max-epochs", type=int, default=8)
    ap.add_argument("--eval-every", type=int, default=10000)
    ap.add_argument("--max-batch", type=int, default=4096)
    ap.add_argument("--base-lr", type=float, default=None,
                    help="the learning rate at batch 64 (default: 2e-3 with adam, 0.02 with sgd)")
    ap.add_argument("--model", default="cnn", help="the example's model: cnn or mlp (784-256-10)")
    ap.add_argument("--lr-factors", default="1",
                    help="each fixed size is tried at its scaled lr (--lr-scaling) times each of these; its best counts, "
                         "and adaptive starts from the best lr of fixed 64 (e.g. 0.5,1,2)")
    ap.add_argument("--lr-scaling", choices=("linear", "sqrt"), default="linear",
                    help="how each fixed size's sweep is centred: base lr x size/64 (linear) or x sqrt(size/64)")
    ap.add_argument("--with", dest="others", default="",
                    help="also python (the adaptive run through import dlrun) and/or torchrun (every fixed size "
                         "and lr of the sweep in PyTorch DDP under torchrun), e.g. python,torchrun")
    ap.add_argument("--step-ms", type=float, default=0, help="slept per optimizer step by every run (GPU-like)")
    ap.add_argument("--sample-ms", type=float, default=0, help="slept per sample of a rank's local batch")
    ap.add_argument("--sync-ms-per-rank", type=float, default=0, help="slept per step x (ranks - 1)")
    ap.add_argument("--optimizer", choices=("adam", "sgd"), default="adam",
                    help="every run's optimizer: adam, or sgd with momentum 0.9 (adaptive: AdaScale)")
    ap.add_argument("--scaling-rule", default="", help="the adaptive run's learning-rate rule (default: the example's, "
                                                        "adam for Adam: lr x sqrt(batch / 64); adascale for SGD: lr x gain)")
    ap.add_argument("--gpus", type=int, default=0, help="run on this many GPUs instead of 2 CPU ranks")
    ap.add_argument("--adaptive-variant", action="append", default=[], metavar="OPTIONS",
                    help="one more adaptive run from each initial rate, with these options of the example added, "
                         "one quoted string (e.g. --adaptive-variant='--replan-every 10'; write it with '=' when "
                         "the string begins with '--'); may be given more than once, for an A/B in one pass")
    ap.add_argument("--svg", default="", help="draw the adaptive run's history there (dlrun history --svg): batch "
                                              "size, goodput and noise scale over time")
    args = ap.parse_args()
    if args.base_lr is None:
        args.base_lr = BASE_LRS[args.optimizer]
    tmp = tempfile.mkdtemp(prefix="dlrun-bench-adaptive-")
    rows = []
    start_lr = args.base_lr
    factors = [float(f) for f in args.lr_factors.split(",")]
    others = [o for o in args.others.split(",") if o]
    if args.optimizer != "adam" and "python" in others:
        ap.error("--with python trains with Adam only (examples/python_adaptive); leave python out")
    if cost_args(args) and "python" in others:
        ap.error("--with python cannot sleep a step cost (examples/python_adaptive has no --step-ms); "
                 "leave python out or the cost")
    torch_rows = []
    resolved = args.scaling_rule if args.scaling_rule not in ("", "auto") else \
        ("adascale" if args.optimizer == "sgd" else "adam")  # the auto rule's choice
    rule = {"adam": "√scale", "adascale": "gain"}.get(resolved, resolved)
    python_row, adaptive_rows, decided = None, [], ""

    def adaptive_runs():
        """The adaptive job from each initial rate: as soon as fixed 64's best rate is known, so
        that a benchmark cut short (a GPU lent for minutes) has them."""
        nonlocal python_row, decided
        start_lrs = [start_lr if v == "best" else float(v) for v in (args.adaptive_lrs or "best").split(",")]
        variants = [""] + args.adaptive_variant
        for n, (lr, variant) in enumerate((lr, v) for lr in start_lrs for v in variants):
            adaptive_args = ["--adaptive", "--batch-size", str(BASE_BATCH), "--lr", f"{lr:g}",
                             "--max-batch-size", str(args.max_batch)] + shlex.split(variant)
            if args.scaling_rule:
                adaptive_args += ["--scaling-rule", args.scaling_rule]
            if "python" in others and n == 0:
                r = run(args.build, f"{tmp}/python-adaptive", adaptive_args, args, "python")
                python_row = (f"import dlrun: adaptive (64 → ≤{args.max_batch}, lr {lr:g} × {rule})", r)
                print(python_row, file=sys.stderr)
            adaptive_dir = f"{tmp}/adaptive-{n}"
            r = run(args.build, adaptive_dir, adaptive_args, args)
            label = f"adaptive (64 → ≤{args.max_batch}, lr {lr:g} × {rule}{', ' + variant if variant else ''})"
            adaptive_rows.append((label, r))
            print(adaptive_rows[-1], file=sys.stderr)
            points = [json.loads(line) for line in open(os.path.join(adaptive_dir, "metrics.jsonl"))]
            r["batches"] = sorted({p["global_batch"] for p in points})
            if n == 0:
                decided = history(args.build, adaptive_dir, args.svg)

    for size in [int(s) for s in args.sizes.split(",")]:
        for program, table in (("cpp", rows), ("torchrun", torch_rows)):
            if program == "torchrun" and "torchrun" not in others:
                continue
            best = None
            for factor in factors:
                ratio = size / BASE_BATCH
                lr = args.base_lr * (ratio if args.lr_scaling == "linear" else ratio ** 0.5) * factor
                r = run(args.build, f"{tmp}/{program}-fixed-{size}-{factor:g}",
                        ["--batch-size", str(size), "--lr", f"{lr:g}"], args, program)
                print((f"{program} fixed {size} (lr {lr:g})", r), file=sys.stderr)
                if best is None or (r["reached"] and (not best[1]["reached"] or r["seconds"] < best[1]["seconds"])):
                    best = (lr, r)
            lr, r = best
            name = "fixed" if program == "cpp" else "torchrun DDP fixed"
            table.append((f"{name} {size} (lr {lr:g}{', the best of the sweep' if len(factors) > 1 else ''})", r))
            if size == BASE_BATCH and program == "cpp":
                start_lr = lr
                adaptive_runs()
    if not adaptive_rows:
        adaptive_runs()

    # OpenBLAS's kernels set the MLP's speed (on an AVX-512 CPU, OPENBLAS_CORETYPE=Haswell halves
    # its matrix products); every run above inherited this setting.
    core = os.environ.get("OPENBLAS_CORETYPE")
    print(f"OpenBLAS kernels: {'OPENBLAS_CORETYPE=' + core if core else 'chosen by OpenBLAS (OPENBLAS_CORETYPE unset)'}")
    goal = f"a test loss of {args.target_loss:g}" if args.target_loss else f"{args.target:.0%}"
    print(f"| run | time to {goal} (training s) | samples | steps | wall s (with checks) |")
    print("|---|---|---|---|---|")
    for name, r in rows + adaptive_rows + torch_rows + ([python_row] if python_row else []):
        if r["reached"]:
            print(f"| {name} | {r['seconds']:.2f} | {r['samples']} | {r['steps']} | {r['wall']:.1f} |")
        else:
            print(f"| {name} | not reached in {args.max_epochs} epochs (final accuracy {r['accuracy']}) | | | {r['wall']:.1f} |")
    fixed = [r["seconds"] for n, r in rows if r["reached"]]
    torch_best = min((r["seconds"] for _, r in torch_rows if r["reached"]), default=None)
    print()
    for name, ad in adaptive_rows:
        if fixed and ad["reached"]:
            best = min(fixed)
            worst = max(r["seconds"] if r["reached"] else float("inf") for n, r in rows)
            print(f"{name} / best fixed = {ad['seconds'] / best:.2f}; worst fixed / adaptive = "
                  f"{worst / ad['seconds']:.2f}" + (" (worst never reached the target)" if worst == float("inf") else ""))
        if torch_best and ad["reached"]:
            print(f"{name} / torchrun DDP's best fixed = {ad['seconds'] / torch_best:.2f}")
        print(f"batch sizes {name} used: {ad['batches']}")
    if torch_best and python_row and python_row[1]["reached"]:
        print(f"import dlrun adaptive / torchrun DDP's best fixed = {python_row[1]['seconds'] / torch_best:.2f}")
    if args.svg:
        print(f"plot: {args.svg}")
    print(f"\nwhat the first adaptive run decided (dlrun history):\n{decided}")


if __name__ == "__main__":
    main()
