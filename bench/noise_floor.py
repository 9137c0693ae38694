#!/usr/bin/env python3
"""The noise floor that AdaptiveBatch counts, against what training shows, on the examples'
small MLP (Fashion-MNIST, one process, PyTorch): after --warm samples at batch --small, the run
alternates segments of --segment samples at --small and --large (each at its rate under the
square-root rule, as AdaptiveBatch's adam and sqrt rules set it) and prints, after each segment,
the training loss (10,000 fixed training images) and the floor the formula gives there:

    floor = lr_eff * tr(P Sigma) / (4 * batch)

Sigma the per-sample gradient covariance (from --samples per-sample gradients), P Adam's
preconditioner 1 / (sqrt(v_hat) + eps) as the runtime floors it (1 for SGD), lr_eff the rate / (1 - momentum) for SGD.
If the formula holds, the training loss after the --large segments sits about
floor(small) - floor(large) below the loss after the --small segments around them. It also
prints tr(P Sigma) / tr(P^2 Sigma) against the mean of Adam's denominators: AdaptiveBatch
measures the second trace and takes the first as it times that mean.

Usage: bench/noise_floor.py [--optimizer adam|sgd] [--lr 2e-3] [--small 64] [--large 1024]
                            [--segment 32768] [--warm 5000] [--segments 2] [--samples 512]
                            [--seed 1]

docs/benchmarks.md ("The noise floor in the model") has its figures, from OMP_NUM_THREADS=1 (the
results are deterministic per seed and thread count)."""
import argparse
import os
import sys

import torch
import torch.nn.functional as F

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "examples", "fashion_mnist"))
from fashion_mnist import SegmentTrainer, load, mlp, optimizer as make_optimizer  # noqa: E402


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--optimizer", choices=("adam", "sgd"), default="adam", help="adam, or sgd with momentum 0.9")
    ap.add_argument("--lr", type=float, default=None, help="the rate at --small (default 2e-3 for adam, 0.02 for sgd)")
    ap.add_argument("--small", type=int, default=64)
    ap.add_argument("--large", type=int, default=1024)
    ap.add_argument("--segment", type=int, default=32768, help="samples per segment")
    ap.add_argument("--warm", type=int, default=5000, help="samples at --small before the first segment")
    ap.add_argument("--segments", type=int, default=2, help="pairs of segments (small, large)")
    ap.add_argument("--samples", type=int, default=512, help="per-sample gradients for the traces")
    ap.add_argument("--seed", type=int, default=1)
    args = ap.parse_args()
    lr0 = args.lr if args.lr is not None else (2e-3 if args.optimizer == "adam" else 0.02)
    momentum = 0.9 if args.optimizer == "sgd" else 0.0
    torch.set_num_threads(int(os.environ.get("OMP_NUM_THREADS", "2")))
    x, y = load("train").tensors
    torch.manual_seed(args.seed)
    model = mlp()
    optimizer = make_optimizer(args.optimizer, model.parameters(), lr0)
    params = list(model.parameters())
    trainer = SegmentTrainer(model, optimizer, x, y, args.seed)
    fixed = torch.randperm(len(y), generator=torch.Generator().manual_seed(99))[:10000]

    def training_loss():
        with torch.no_grad():
            return F.cross_entropy(model(x[fixed]), y[fixed]).item()

    def preconditioner():
        if args.optimizer != "adam":
            return [torch.ones_like(p) for p in params]
        out = []
        for p in params:
            s = optimizer.state[p]
            step = float(s["step"])
            root = (s["exp_avg_sq"] / (1 - 0.999 ** step)).sqrt()
            # floored at a tenth of the tensor's mean, as the runtime's preconditioner does
            out.append(1.0 / (torch.maximum(root, 0.1 * root.mean()) + 1e-8))
        return out

    def traces():
        """tr(P Sigma), tr(P^2 Sigma) from per-sample gradients, and the mean denominator."""
        P = preconditioner()
        grads = []
        for i in fixed[:args.samples]:
            model.zero_grad()
            F.cross_entropy(model(x[i:i + 1]), y[i:i + 1]).backward()
            grads.append([p.grad.detach().clone() for p in params])
        n = len(grads)
        mean = [sum(g[k] for g in grads) / n for k in range(len(params))]
        tr_p = tr_p2 = 0.0
        for g in grads:
            for d, m, q in zip(g, mean, P):
                sq = (d - m) ** 2
                tr_p += (q * sq).sum().item() / (n - 1)
                tr_p2 += (q * q * sq).sum().item() / (n - 1)
        denominators = torch.cat([(1 / q).flatten() for q in P])
        return tr_p, tr_p2, denominators.mean().item()

    trainer.train(args.warm, args.small, lr0)
    print(f"{args.optimizer}, rate {lr0} at {args.small}, square-root rule; seed {args.seed}")
    print("| segment | batch | rate | training loss after | tr(PΣ) | floor | tr(PΣ)/tr(P²Σ) | mean denominator |")
    print("|---|---|---|---|---|---|---|---|")
    for pair in range(args.segments):
        for size in (args.small, args.large):
            lr = lr0 * (size / args.small) ** 0.5
            trainer.train(args.segment, size, lr)
            loss = training_loss()
            tr_p, tr_p2, mean_denominator = traces()
            floor = lr / (1 - momentum) * tr_p / (4 * size)
            print(f"| {2 * pair + 1 + (size == args.large)} | {size} | {lr:.4g} | {loss:.4f} | {tr_p:.4g} "
                  f"| {floor:.4f} | {tr_p / tr_p2:.3g} | {mean_denominator:.3g} |", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
