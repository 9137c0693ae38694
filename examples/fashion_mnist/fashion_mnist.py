"""Fashion-MNIST and the examples' models for Python: the twins of fashion_mnist_data.hpp,
cnn.hpp and mlp.hpp (and of main.cpp's --optimizer), shared by examples/python_ddp, examples/python_adaptive and the
benchmarks, so that each trains and times exactly the model the C++ example does.

The data is Debian's dataset-fashion-mnist (/usr/share/datasets/fashion-mnist, or
$FASHION_MNIST_DIR)."""
import gzip
import os

import numpy as np
import torch
import torch.nn as nn
import torch.nn.functional as F
from torch.utils.data import TensorDataset

DATA = os.environ.get("FASHION_MNIST_DIR", "/usr/share/datasets/fashion-mnist")


def load(kind, limit=None):
    """The 'train' or 't10k' split as a TensorDataset of normalised images and labels."""
    with gzip.open(os.path.join(DATA, f"{kind}-images-idx3-ubyte.gz")) as f:
        images = np.frombuffer(f.read(), np.uint8, offset=16).reshape(-1, 1, 28, 28)
    with gzip.open(os.path.join(DATA, f"{kind}-labels-idx1-ubyte.gz")) as f:
        labels = np.frombuffer(f.read(), np.uint8, offset=8)
    if limit:
        images, labels = images[:limit], labels[:limit]
    x = torch.from_numpy(images.astype(np.float32) / 255.0)
    return TensorDataset((x - 0.2860) / 0.3530, torch.from_numpy(labels.astype(np.int64)))


class Cnn(nn.Module):
    """The small CNN (0.2 M parameters)."""

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


def mlp():
    """The small MLP, 784-256-10: mostly fixed per-step cost on a CPU."""
    return nn.Sequential(nn.Flatten(), nn.Linear(784, 256), nn.ReLU(), nn.Linear(256, 10))


class SegmentTrainer:
    """Trains `model` on (x, y) in segments, each at its own batch size and learning rate:
    batches drawn in a shuffled order without replacement (a new permutation of the data when one
    runs out), deterministic per `seed`. For the benchmarks that switch batch sizes mid-run
    (bench/batch_alternation.py, bench/noise_floor.py)."""

    def __init__(self, model, optimizer, x, y, seed):
        self.model, self.optimizer, self.x, self.y = model, optimizer, x, y
        self.generator = torch.Generator().manual_seed(seed)
        self.order, self.at = torch.randperm(len(y), generator=self.generator), 0

    def next_batch(self, size):
        if self.at + size > len(self.y):
            self.order, self.at = torch.randperm(len(self.y), generator=self.generator), 0
        self.at += size
        return self.order[self.at - size:self.at]

    def train(self, samples, size, lr):
        """samples // size steps at batch `size` and learning rate `lr`."""
        for group in self.optimizer.param_groups:
            group["lr"] = lr
        for _ in range(samples // size):
            batch = self.next_batch(size)
            self.optimizer.zero_grad()
            F.cross_entropy(self.model(self.x[batch]), self.y[batch]).backward()
            self.optimizer.step()


def optimizer(name, parameters, lr, momentum=0.9):
    """'adam', or 'sgd' with momentum: what examples/fashion_mnist --optimizer trains with."""
    if name == "sgd":
        return torch.optim.SGD(parameters, lr=lr, momentum=momentum)
    return torch.optim.Adam(parameters, lr=lr)
