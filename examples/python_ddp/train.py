"""Fashion-MNIST with PyTorch DistributedDataParallel: an ordinary torch.distributed
(env://) script, unmodified for dlrun. Run it with

    dlrun local --nproc 2 python3 examples/python_ddp/train.py --epochs 2
    dlrun local --gpus 2 python3 examples/python_ddp/train.py --epochs 2    (NCCL)

It reads Debian's dataset-fashion-mnist (/usr/share/datasets/fashion-mnist, or
$FASHION_MNIST_DIR) and prints test accuracy on its last line as `test_accuracy=0.XXXX`."""
import argparse
import gzip
import os
import time

import numpy as np
import torch
import torch.distributed as dist
import torch.nn as nn
import torch.nn.functional as F
from torch.nn.parallel import DistributedDataParallel
from torch.utils.data import DataLoader, DistributedSampler, TensorDataset

DATA = os.environ.get("FASHION_MNIST_DIR", "/usr/share/datasets/fashion-mnist")


def load(kind, limit=None):
    with gzip.open(os.path.join(DATA, f"{kind}-images-idx3-ubyte.gz")) as f:
        images = np.frombuffer(f.read(), np.uint8, offset=16).reshape(-1, 1, 28, 28)
    with gzip.open(os.path.join(DATA, f"{kind}-labels-idx1-ubyte.gz")) as f:
        labels = np.frombuffer(f.read(), np.uint8, offset=8)
    if limit:
        images, labels = images[:limit], labels[:limit]
    x = torch.from_numpy(images.astype(np.float32) / 255.0)
    return TensorDataset((x - 0.2860) / 0.3530, torch.from_numpy(labels.astype(np.int64)))


class Net(nn.Module):
    def __init__(self):
        super().__init__()
        self.conv1 = nn.Conv2d(1, 16, 3, padding=1)
        self.conv2 = nn.Conv2d(16, 32, 3, padding=1)
        self.fc1 = nn.Linear(32 * 7 * 7, 128)
        self.fc2 = nn.Linear(128, 10)

    def forward(self, x):
        x = F.max_pool2d(F.relu(self.conv1(x)), 2)
        x = F.max_pool2d(F.relu(self.conv2(x)), 2)
        return self.fc2(F.relu(self.fc1(x.flatten(1))))


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
    model = DistributedDataParallel(Net().to(device))
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
