"""dlrun's runtime for PyTorch scripts.

A script run by ``dlrun local`` (or ``dlrun run``, ``dlrun submit``) gets dlrun's C++ runtime
from Python: gradients averaged by the runtime (shared memory between the ranks of one host,
Gloo across hosts, NCCL on GPUs), overlapped with backward; a data loader whose position is
a global sample index, so that training resumes exactly (no sample lost or repeated) at any
number of ranks; checkpoints written atomically (a MANIFEST of sizes and CRC-32s, an older one
loaded when the newest is damaged); and dlrun's stop protocol, so that ``dlrun resize`` and
the goodput scheduler can move the job. Without dlrun's environment it is a world of one.

    import dlrun
    ctx = dlrun.init()
    model = dlrun.DataParallel(model)
    loader = dlrun.ElasticDataLoader(dataset, batch_size=64)
    ckpt = dlrun.Checkpoint(track=[model, optimizer, loader])
    ckpt.restore()
    for epoch in loader.epochs(3):
        for x, y in loader:
            loss = F.cross_entropy(model(x), y, reduction="sum") * loader.loss_scale()
            loss.backward(); optimizer.step(); optimizer.zero_grad()
            if ctx.stop_requested():
                ckpt.save(); raise SystemExit(ctx.exit_code())

Errors are dlrun.Error and its subclasses (ConfigError, EnvironmentError, RendezvousTimeout,
CommunicationError, CheckpointError), with the runtime's messages. docs/python.md has the
whole guide, and how to move a DDP or AdaptDL script over.
"""

import torch  # noqa: F401  (loads LibTorch before the extension module, which links it)

from ._dlrun import (CheckpointError, CommunicationError, ConfigError, EnvironmentError, Error,
                     RendezvousTimeout, ElasticSampler, SampleBatch)
from .checkpoint import Checkpoint
from .context import Context, init
from .loader import AdaptiveDataLoader, ElasticDataLoader
from .parallel import DataParallel

# EnvironmentError stays dlrun.EnvironmentError only: in `from dlrun import *` it would hide
# Python's own (OSError), and `except EnvironmentError` would stop catching FileNotFoundError.
__all__ = [
    "init", "Context", "DataParallel", "ElasticDataLoader", "AdaptiveDataLoader", "ElasticSampler", "SampleBatch", "Checkpoint",
    "Error", "ConfigError", "RendezvousTimeout", "CommunicationError", "CheckpointError",
]
