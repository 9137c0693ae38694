"""An unmodified torch.distributed (env://) program: every rank contributes rank+1 and
checks the sum. Run by the integration tests under `dlrun local`."""
import os

import torch
import torch.distributed as dist

dist.init_process_group("gloo")  # reads MASTER_ADDR, MASTER_PORT, RANK, WORLD_SIZE
rank, world = dist.get_rank(), dist.get_world_size()
value = torch.tensor([float(rank + 1)])
dist.all_reduce(value)
expected = world * (world + 1) / 2
print(f"rank {rank} of {world} local {os.environ['LOCAL_RANK']} sum {value.item():g} expected {expected:g}", flush=True)
dist.barrier()
dist.destroy_process_group()
raise SystemExit(0 if value.item() == expected else 1)
