"""The step of bench/runtime/runtime_step.cpp in PyTorch DDP (Gloo), for torchrun:
rank 0 prints `torch-ddp <model> ranks=<n> step_ms=<median>`."""
import os
import sys
import time

import torch
import torch.distributed as dist
import torch.nn as nn
import torch.nn.functional as F

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "examples", "fashion_mnist"))
from fashion_mnist import Cnn, mlp as small  # noqa: E402  (the examples' CNN and small MLP)


def mlp():
    return nn.Sequential(nn.Flatten(), nn.Linear(784, 2048), nn.ReLU(), nn.Linear(2048, 2048),
                         nn.ReLU(), nn.Linear(2048, 2048), nn.ReLU(), nn.Linear(2048, 10))


def main():
    name = sys.argv[1] if len(sys.argv) > 1 else "mlp"
    steps = int(sys.argv[2]) if len(sys.argv) > 2 else 30
    dist.init_process_group("gloo")
    torch.set_num_threads(int(os.environ.get("OMP_NUM_THREADS", "1")))
    torch.manual_seed(0)
    model = Cnn() if name == "cnn" else small() if name == "small" else mlp()
    batch = 32 if name == "small" else 64
    ddp = nn.parallel.DistributedDataParallel(model)
    sgd = torch.optim.SGD(ddp.parameters(), lr=0.01)
    x = torch.randn(batch, 1, 28, 28)
    y = torch.randint(0, 10, (batch,))
    times = []
    for i in range(5 + steps):
        start = time.perf_counter()
        sgd.zero_grad()
        F.cross_entropy(ddp(x), y).backward()
        sgd.step()
        if i >= 5:
            times.append((time.perf_counter() - start) * 1000)
    dist.barrier()
    times.sort()
    if dist.get_rank() == 0:
        print(f"torch-ddp {name} ranks={dist.get_world_size()} step_ms={times[len(times) // 2]:.2f}")
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
