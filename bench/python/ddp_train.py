"""Fashion-MNIST to a target test accuracy (or test loss) with PyTorch DDP under torchrun (Gloo, or NCCL with
--device cuda): the fixed batch arm of bench/adaptive.py --with torchrun. The same model, optimizer (Adam, or SGD with
--optimizer sgd as in examples/fashion_mnist), seed and accuracy checks as examples/fashion_mnist
and examples/python_adaptive (Adam only): every --eval-every
samples the test accuracy is measured (each rank its share); as soon as it reaches the
target, rank 0 prints `target reached: test_accuracy=A after N samples, S steps, T s of
training` (T: optimizer steps only), like the examples.

As in examples/fashion_mnist, the data set is one tensor on the rank's device and a step's batch is
gathered from it by index (DistributedSampler's order, each rank its share); with --device cuda each
step ends by waiting for the GPU (the example reads the step's loss), so the time counted is the
step's.

    torchrun --nproc_per_node 2 bench/python/ddp_train.py --batch-size 256 --lr 8e-3 --target-accuracy 0.88"""
import argparse
import os
import sys
import time

import torch
import torch.distributed as dist
import torch.nn.functional as F
from torch.nn.parallel import DistributedDataParallel
from torch.utils.data import DistributedSampler

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "examples", "fashion_mnist"))
from fashion_mnist import Cnn, load, mlp, optimizer as make_optimizer  # noqa: E402


def evaluate(model, test, rank, world, device):
    """The test set's accuracy and mean cross-entropy (each rank its share)."""
    images, labels = test
    n = len(labels)
    begin, end = rank * n // world, (rank + 1) * n // world
    model.eval()
    correct, loss = 0, 0.0
    with torch.no_grad():
        for i in range(begin, end, 1000):
            logits, y = model(images[i:min(end, i + 1000)]), labels[i:min(end, i + 1000)]
            correct += (logits.argmax(1) == y).sum().item()
            loss += F.cross_entropy(logits, y, reduction="sum").item()
    model.train()
    totals = torch.tensor([float(correct), loss, float(end - begin)], dtype=torch.float64, device=device)
    dist.all_reduce(totals)
    return (totals[0] / totals[2]).item(), (totals[1] / totals[2]).item()


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model", choices=["cnn", "mlp"], default="cnn")
    parser.add_argument("--batch-size", type=int, default=64, help="global")
    parser.add_argument("--optimizer", choices=["adam", "sgd"], default="adam",
                        help="adam, or sgd with --momentum (as examples/fashion_mnist)")
    parser.add_argument("--lr", type=float, default=2e-3)
    parser.add_argument("--momentum", type=float, default=0.9, help="SGD's")
    parser.add_argument("--epochs", type=int, default=2)
    parser.add_argument("--target-accuracy", type=float, default=0.88)
    parser.add_argument("--target-test-loss", type=float, default=0,
                        help="instead of --target-accuracy: stop once the test set's mean cross-entropy is at most this")
    parser.add_argument("--eval-every", type=int, default=10000)
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--step-ms", type=float, default=0, help="slept per step: a GPU-like fixed cost")
    parser.add_argument("--sample-ms", type=float, default=0, help="slept per sample of the local batch")
    parser.add_argument("--sync-ms-per-rank", type=float, default=0, help="slept per step x (world size - 1)")
    parser.add_argument("--device", choices=["cpu", "cuda"], default="cpu",
                        help="cuda: each rank on the GPU of its LOCAL_RANK, NCCL")
    args = parser.parse_args()
    device = torch.device("cpu")
    if args.device == "cuda":
        torch.cuda.set_device(int(os.environ.get("LOCAL_RANK", "0")) % torch.cuda.device_count())
        device = torch.device("cuda", torch.cuda.current_device())
    dist.init_process_group("nccl" if args.device == "cuda" else "gloo")
    torch.set_num_threads(int(os.environ.get("OMP_NUM_THREADS", "1")))
    rank, world = dist.get_rank(), dist.get_world_size()
    torch.manual_seed(args.seed)
    train, test = load("train"), load("t10k")
    sampler = DistributedSampler(train, num_replicas=world, rank=rank, shuffle=True, seed=args.seed)
    images, labels = (t.to(device) for t in train.tensors)
    test = tuple(t.to(device) for t in test.tensors)
    local_batch = args.batch_size // world
    model = DistributedDataParallel((Cnn() if args.model == "cnn" else mlp()).to(device))
    optimizer = make_optimizer(args.optimizer, model.parameters(), args.lr, args.momentum)
    samples, steps, seconds, next_eval, last = 0, 0, 0.0, args.eval_every, 0.0
    for epoch in range(args.epochs):
        sampler.set_epoch(epoch)
        order = list(sampler)
        for i in range(0, len(order), local_batch):
            start = time.perf_counter()
            index = torch.tensor(order[i:i + local_batch], device=device)
            x, y = images.index_select(0, index), labels.index_select(0, index)
            loss = F.cross_entropy(model(x), y)
            # The same slept GPU-like cost as examples/fashion_mnist --step-ms, before the backward.
            cost_ms = args.step_ms + args.sample_ms * len(y) + args.sync_ms_per_rank * (world - 1)
            if cost_ms > 0:
                time.sleep(cost_ms / 1000)
            loss.backward()
            optimizer.step()
            optimizer.zero_grad()
            if device.type == "cuda":
                torch.cuda.synchronize()
            seconds += time.perf_counter() - start
            steps += 1
            samples += len(y) * world
            if samples >= next_eval:
                next_eval = samples + args.eval_every
                last, test_loss = evaluate(model, test, rank, world, device)
                if (test_loss <= args.target_test_loss if args.target_test_loss else last >= args.target_accuracy):
                    what = f"test_loss={test_loss:.5f}" if args.target_test_loss else f"test_accuracy={last:.4f}"
                    if rank == 0:
                        print(f"target reached: {what} after {samples} samples, {steps} steps, "
                              f"{seconds:.2f} s of training", flush=True)
                        print(f"test_accuracy={last:.4f}", flush=True)
                    dist.destroy_process_group()
                    return
    final = evaluate(model, test, rank, world, device)[0]  # collective: every rank
    if rank == 0:
        print(f"test_accuracy={final:.4f}", flush=True)
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
