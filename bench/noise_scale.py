#!/usr/bin/env python3
"""The gradient noise scale of the examples' small MLP on Fashion-MNIST, computed directly from
per-sample gradients: a check of what dlrun::AdaptiveBatch estimates from two ranks' gradient
norms (docs/adaptive.md, "The gradient noise scale"), independent of its code.

It trains the MLP in one process (PyTorch, Adam or --optimizer sgd, the given batch and learning
rate, seed 1) and,
at each of --at's steps, takes the per-sample gradients of --samples random training samples
(their covariance's trace, tr(S)) and the gradient over --full samples (|G|^2, less the part of
tr(S) that a finite average keeps), and prints the noise scale B_simple = tr(S)/|G|^2, on the raw
gradients and preconditioned by Adam's denominators as AdaptiveBatch's `adam` rule does (each
element divided by sqrt(v_hat) + eps, floored at a tenth of its tensor's mean), and the
statistical efficiency (B_simple + 64)/(B_simple + M) that Pollux's model gives to batches M
from the preconditioned figure (the `adam` rule's model takes its square root since 2026-11-25:
docs/adaptive.md, "Why Adam's efficiency is the square root").

With --hessian N it also gives the noise scale that weighs each direction by the loss's
curvature, B_noise = tr(H S)/(G^T H G) (McCandlish et al., "An Empirical Model of Large-Batch
Training", relate it to the critical batch; B_simple is its value when H is a multiple of the
identity), with H the Hessian over N random training samples (Hessian-vector products by double
backward), in the direction of a preconditioned SGD step (the adam column: the gradients divided
by Adam's denominators; Adam's momentum, and SGD's, are left out). H is taken over samples drawn
from a generator of its own, so --hessian does not change the training. A figure whose
denominator or numerator is not positive (H is not positive definite) prints as n/a.
--optimizer sgd trains with SGD and momentum 0.9 instead of Adam.

Usage: bench/noise_scale.py [--lr 1e-3] [--batch 64] [--at 100,300,1000,2000] [--samples 1024]
                            [--full 20000] [--optimizer adam|sgd] [--hessian 4096]

docs/benchmarks.md compares its figures with the noise scale a run's metrics.jsonl shows."""
import argparse
import os
import sys

import torch
import torch.nn.functional as F

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "examples", "fashion_mnist"))
from fashion_mnist import load, mlp, optimizer as make_optimizer  # noqa: E402


def flat_grad(params):
    return torch.cat([p.grad.reshape(-1) for p in params])


def adam_denominators(optimizer, params):
    """Each element's sqrt(v_hat) + eps, floored at a tenth of its tensor's mean (as AdaptiveBatch)."""
    out = []
    for p in params:
        state = optimizer.state[p]
        step = state["step"]
        step = step.item() if torch.is_tensor(step) else step
        beta2 = optimizer.param_groups[0]["betas"][1]
        d = (state["exp_avg_sq"] / (1 - beta2 ** step)).sqrt() + optimizer.param_groups[0]["eps"]
        out.append(torch.maximum(d, 0.1 * d.mean()).reshape(-1))
    return torch.cat(out)


def noise_scales(model, optimizer, x, y, args, generator):
    params = list(model.parameters())
    model.zero_grad()
    full = torch.randperm(len(y), generator=generator)[:args.full]
    F.cross_entropy(model(x[full]), y[full]).backward()
    total = flat_grad(params).clone()
    picked = torch.randperm(len(y), generator=generator)[:args.samples]
    per_sample = []
    for i in picked:
        model.zero_grad()
        F.cross_entropy(model(x[i:i + 1]), y[i:i + 1]).backward()
        per_sample.append(flat_grad(params).clone())
    model.zero_grad()
    per_sample = torch.stack(per_sample)
    out = {}
    scales = [("raw", None)]
    if isinstance(optimizer, torch.optim.Adam):
        scales.append(("adam", adam_denominators(optimizer, params)))
    hvp = hessian_product(model, params, x, y, args) if args.hessian else None
    for name, scale in scales:
        g = per_sample if scale is None else per_sample / scale
        G = total if scale is None else total / scale
        trace = (g - g.mean(0)).pow(2).sum(1).mean().item()
        sqr = G.pow(2).sum().item() - trace / args.full
        out[name] = trace / sqr if sqr > 0 else float("nan")
        if hvp is None:
            continue
        # B_noise = tr(H S) / (G^T H G) for a preconditioned SGD step -lr * g (g already divided
        # by Adam's denominators in the adam column; momentum left out): the best such step's
        # improvement falls by 1 / (1 + B_noise / M) with batch M (McCandlish et al.).
        d = g - g.mean(0)
        curvature = sum((v * hvp(v)).sum().item() for v in d) / len(d)
        along = (G * hvp(G)).sum().item() - curvature / args.full
        out[name + "_hessian"] = curvature / along if along > 0 and curvature > 0 else float("nan")
    return out


HESSIAN_DRAWS = torch.Generator().manual_seed(3)  # its own: --hessian leaves the training as it is


def hessian_product(model, params, x, y, args):
    """v -> H v, H the loss's Hessian over --hessian random training samples (one graph, reused)."""
    picked = torch.randperm(len(y), generator=HESSIAN_DRAWS)[:args.hessian]
    loss = F.cross_entropy(model(x[picked]), y[picked])
    grads = torch.autograd.grad(loss, params, create_graph=True)
    flat = torch.cat([g.reshape(-1) for g in grads])

    def product(v):
        return torch.cat([h.reshape(-1) for h in torch.autograd.grad(flat @ v, params, retain_graph=True)])
    return product


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--lr", type=float, default=1e-3)
    ap.add_argument("--batch", type=int, default=64)
    ap.add_argument("--at", default="100,300,1000,2000", help="steps to measure at")
    ap.add_argument("--samples", type=int, default=1024, help="per-sample gradients per measurement")
    ap.add_argument("--full", type=int, default=20000, help="samples behind |G|^2")
    ap.add_argument("--sizes", default="256,512,1024", help="batches to give the efficiency of")
    ap.add_argument("--optimizer", choices=("adam", "sgd"), default="adam",
                    help="adam, or sgd with momentum 0.9 (as examples/fashion_mnist --optimizer)")
    ap.add_argument("--hessian", type=int, default=0,
                    help="also B_noise = tr(H S)/(G^T H G), H over this many samples (0: not)")
    args = ap.parse_args()
    torch.manual_seed(1)
    torch.set_num_threads(int(os.environ.get("OMP_NUM_THREADS", "2")))
    generator = torch.Generator().manual_seed(2)
    x, y = load("train").tensors
    model = mlp()
    optimizer = make_optimizer(args.optimizer, model.parameters(), args.lr)
    at = sorted(int(s) for s in args.at.split(","))
    sizes = [int(s) for s in args.sizes.split(",")]
    if at[0] < 1:
        ap.error("--at: steps from 1 (Adam has no denominators before its first step, and SGD's "
                 "figures are counted the same way)")
    kinds = ["raw"] + (["adam"] if args.optimizer == "adam" else [])
    columns = [f"B_simple {k}" for k in kinds] + ([f"B_noise {k}" for k in kinds] if args.hessian else [])
    print(f"| step | samples seen | {' | '.join(columns)} | Pollux's efficiency at {', '.join(map(str, sizes))} (from B_simple {kinds[-1]}) |")
    print("|---" * (len(columns) + 3) + "|")
    step = 0
    while step <= at[-1]:
        order = torch.randperm(len(y), generator=generator)
        for begin in range(0, len(y) - args.batch + 1, args.batch):
            if step in at:
                phi = noise_scales(model, optimizer, x, y, args, generator)
                last = phi[kinds[-1]]
                eff = ", ".join(f"{(last + args.batch) / (last + m):.2f}" for m in sizes)
                values = [phi[k] for k in kinds] + ([phi[k + "_hessian"] for k in kinds] if args.hessian else [])
                print(f"| {step} | {step * args.batch} | {' | '.join('n/a' if v != v else f'{v:.0f}' for v in values)} | {eff} |", flush=True)
            if step == at[-1]:
                return 0
            batch = order[begin:begin + args.batch]
            optimizer.zero_grad()
            F.cross_entropy(model(x[batch]), y[batch]).backward()
            optimizer.step()
            step += 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
