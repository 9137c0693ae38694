"""Fashion-MNIST with PyTorch DistributedDataParallel: an ordinary torch.distributed
(env://) script, unmodified for dlrun. Run it with

    dlrun local --nproc 2 python3 examples/python_ddp/train.py --epochs 2
    dlrun local --gpus 2 python3 examples/python_ddp/train.py --epochs 2    (NCCL)

It reads Debian's dataset-fashion-mnist (/usr/share/datasets/fashion-mnist, or
$FASHION_MNIST_DIR) and prints test accuracy on its last line as `test_accuracy=0.XXXX`."""
import argparse
import os
import sys
import time

import torch
import torch.distributed as dist
import torch.nn.functional as F
from torch.nn.parallel import DistributedDataParallel
from torch.utils.data import DataLoader, DistributedSampler

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "fashion_mnist"))
from fashion_mnist import Cnn, load  # noqa: E402  (the C++ example's model and data, in Python)


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--epochs", type=int, default=2)
    parser.add_argument("--batch-size", type=int, default=128, help="global batch size")
    parser.add_argument("--lr", type=float, default=0.05)
    parser.add_argument("--train-limit", type=int, default=None, help="use the first N training images")
    parser.add_argument("--log-steps", action="store_true", help="print a line after every step (rank 0)")
    parser.add_argument("--device", choices=["auto", "cpu", "cuda"], default="auto",
                        help="auto: a GPU when dlrun started GPU ranks (--gpus) or CUDA is there")
    args = parser.parse_args()

    # DLRUN_DEVICE says what dlrun started this rank as; torchrun sets nothing.
    use_cuda = args.device == "cuda" or (args.device == "auto" and torch.cuda.is_available()
                                         and os.environ.get("DLRUN_DEVICE", "cuda") == "cuda")
    if use_cuda:  # dlrun shows each GPU rank its own GPU; with all visible, take LOCAL_RANK's
        torch.cuda.set_device(int(os.environ.get("LOCAL_RANK", "0")) % torch.cuda.device_count())
    device = torch.device("cuda", torch.cuda.current_device()) if use_cuda else torch.device("cpu")
    dist.init_process_group("nccl" if use_cuda else "gloo")
    rank, world = dist.get_rank(), dist.get_world_size()
    torch.manual_seed(0)
    train, test = load("train", args.train_limit), load("t10k")
    sampler = DistributedSampler(train, num_replicas=world, rank=rank, shuffle=True, seed=0)
    loader = DataLoader(train, batch_size=args.batch_size // world, sampler=sampler)
    model = DistributedDataParallel(Cnn().to(device))
    optimizer = torch.optim.SGD(model.parameters(), lr=args.lr, momentum=0.9)

    for epoch in range(args.epochs):
        sampler.set_epoch(epoch)
        start, total, count = time.time(), 0.0, 0
        model.train()
        for x, y in loader:
            x, y = x.to(device), y.to(device)
            optimizer.zero_grad()
            loss = F.cross_entropy(model(x), y)
            loss.backward()
            optimizer.step()
            total, count = total + loss.item(), count + 1
            if args.log_steps and rank == 0:
                print(f"step {count} loss {loss.item():.4f} t={time.time():.3f}", flush=True)
        if rank == 0:
            print(f"epoch {epoch + 1}/{args.epochs}: loss {total / count:.4f}, "
                  f"{len(train) / (time.time() - start):.0f} samples/s", flush=True)

    model.eval()
    correct = 0
    with torch.no_grad():
        for x, y in DataLoader(test, batch_size=1000):
            correct += (model(x.to(device)).argmax(1) == y.to(device)).sum().item()
    if rank == 0:
        print(f"test_accuracy={correct / len(test):.4f}", flush=True)
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
