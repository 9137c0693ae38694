#!/usr/bin/env python3
"""What a switch of batch size does to the held-out loss right away, on the examples' small MLP
(Fashion-MNIST, one process, PyTorch): after --warm samples at batch --small, the run alternates
segments of --segment samples each at --small and --large (small, large, small, ..., small: nine
segments), each at its rate (--lr at --small, scaled to --large by --rule: the square root of
the batch ratio, as AdaptiveBatch's adam rule does, or linearly), and prints the drop of the
held-out loss over each segment (5,000 fixed test images: no sampling noise in the measure).

If a sample at the large batch were worth less than one at the small batch (the gradient noise
scale's statistical efficiency), the large segments' drops would be the smaller ones. A drop that
changes sign with the batch says something else: each batch and rate trains toward its own noise
floor (a rate per sample that falls as the batch grows under the square-root rule is a lower
temperature), and the held-out loss follows that floor within a segment.

Usage: bench/batch_alternation.py [--optimizer adam|sgd] [--small 64] [--large 1024]
                                  [--lr 2e-3] [--rule sqrt|linear] [--segment 32768]
                                  [--warm 5000] [--seeds 1,2,3]

docs/benchmarks.md ("What a switch of batch size does to the held-out loss") has its figures."""
import argparse
import os
import sys

import torch
import torch.nn.functional as F

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "examples", "fashion_mnist"))
from fashion_mnist import SegmentTrainer, load, mlp, optimizer as make_optimizer  # noqa: E402


def run(args, seed, x, y, tx, ty):
    torch.manual_seed(seed)
    model = mlp()
    optimizer = make_optimizer(args.optimizer, model.parameters(), args.lr)
    trainer = SegmentTrainer(model, optimizer, x, y, seed)

    def train(samples, size):
        ratio = size / args.small
        trainer.train(samples, size, args.lr * (ratio ** 0.5 if args.rule == "sqrt" else ratio))

    def heldout():
        with torch.no_grad():
            return F.cross_entropy(model(tx), ty).item()

    train(args.warm, args.small)
    drops = []
    for size in [args.small, args.large] * 4 + [args.small]:
        before = heldout()
        train(args.segment, size)
        drops.append(before - heldout())
    return drops


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--optimizer", choices=("adam", "sgd"), default="adam", help="adam, or sgd with momentum 0.9")
    ap.add_argument("--small", type=int, default=64)
    ap.add_argument("--large", type=int, default=1024)
    ap.add_argument("--lr", type=float, default=2e-3, help="the rate at --small")
    ap.add_argument("--rule", choices=("sqrt", "linear"), default="sqrt", help="the rate at --large")
    ap.add_argument("--segment", type=int, default=32768, help="samples per segment")
    ap.add_argument("--warm", type=int, default=5000, help="samples at --small before the first segment")
    ap.add_argument("--seeds", default="1,2,3")
    args = ap.parse_args()
    torch.set_num_threads(int(os.environ.get("OMP_NUM_THREADS", "2")))
    x, y = load("train").tensors
    tx, ty = load("t10k").tensors
    tx, ty = tx[:5000], ty[:5000]
    sizes = [args.small, args.large] * 4 + [args.small]
    print("| seed | " + " | ".join(str(s) for s in sizes) + " | mean drop at " + str(args.small)
          + " (after the first) | mean drop at " + str(args.large) + " |")
    print("|---" * (len(sizes) + 3) + "|")
    for seed in [int(s) for s in args.seeds.split(",")]:
        drops = run(args, seed, x, y, tx, ty)
        small = drops[2::2]
        large = drops[1::2]
        print(f"| {seed} | " + " | ".join(f"{d:+.3f}" for d in drops)
              + f" | {sum(small) / len(small):+.3f} | {sum(large) / len(large):+.3f} |", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
