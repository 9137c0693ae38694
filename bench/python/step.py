"""One training step of the examples' CNN or small MLP, data-parallel, timed: through
dlrun.DataParallel (run it under `dlrun local`) or PyTorch's DistributedDataParallel (under
torchrun, Gloo). Random data of a fixed per-rank batch, Adam, one thread per rank. Rank 0
prints `<impl> <model> ranks=<n> step_ms=<median>` over --steps steps after --warmup.

    dlrun local --nproc 2 python3 bench/python/step.py --impl dlrun --model mlp
    torchrun --nproc_per_node 2 bench/python/step.py --impl ddp --model mlp

bench/python_step.sh runs both, side by side; docs/benchmarks.md has the numbers."""
import argparse
import os
import sys
import time

import torch
import torch.nn.functional as F

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "examples", "fashion_mnist"))
from fashion_mnist import Cnn, mlp  # noqa: E402


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--impl", choices=["dlrun", "ddp"], required=True)
    parser.add_argument("--model", choices=["cnn", "mlp"], default="mlp")
    parser.add_argument("--batch", type=int, default=32, help="per rank")
    parser.add_argument("--steps", type=int, default=300)
    parser.add_argument("--warmup", type=int, default=30)
    parser.add_argument("--device", choices=["cpu", "cuda"], default="cpu",
                        help="cuda: each rank on its GPU (dlrun local --gpus N; torchrun: LOCAL_RANK's), NCCL")
    args = parser.parse_args()
    torch.set_num_threads(int(os.environ.get("OMP_NUM_THREADS", "1")))
    torch.manual_seed(0)
    model = Cnn() if args.model == "cnn" else mlp()
    if args.impl == "dlrun":
        import dlrun
        ctx = dlrun.init(device=args.device)
        rank, world, device = ctx.rank, ctx.world_size, torch.device(ctx.device)
        model = dlrun.DataParallel(model.to(device))
        barrier = ctx.barrier
    else:
        import torch.distributed as dist
        device = torch.device("cpu")
        if args.device == "cuda":
            torch.cuda.set_device(int(os.environ.get("LOCAL_RANK", "0")) % torch.cuda.device_count())
            device = torch.device("cuda", torch.cuda.current_device())
        dist.init_process_group("nccl" if args.device == "cuda" else "gloo")
        rank, world = dist.get_rank(), dist.get_world_size()
        model = torch.nn.parallel.DistributedDataParallel(model.to(device))
        barrier = dist.barrier
    optimizer = torch.optim.Adam(model.parameters(), lr=1e-3)
    x = torch.randn(args.batch, 1, 28, 28, device=device)
    y = torch.randint(0, 10, (args.batch,), device=device)
    times = []
    for i in range(args.warmup + args.steps):
        start = time.perf_counter()
        F.cross_entropy(model(x), y).backward()
        optimizer.step()
        optimizer.zero_grad()
        if args.impl == "dlrun":
            ctx.stop_requested()  # what a dlrun loop asks every step (it ends the step's vote)
        if device.type == "cuda":
            torch.cuda.synchronize()
        if i >= args.warmup:
            times.append((time.perf_counter() - start) * 1000)
    barrier()
    times.sort()
    if rank == 0:
        print(f"{args.impl} {args.model} ranks={world} step_ms={times[len(times) // 2]:.3f}", flush=True)


if __name__ == "__main__":
    main()
