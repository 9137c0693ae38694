"""dlrun.DataParallel: one model replica per rank, trained as one model."""

import torch

from . import _arguments, _dlrun, context as _context


class DataParallel(torch.nn.Module):
    """Wraps a model so that loss.backward() leaves every rank with the gradient averaged over
    all ranks, as torch.nn.parallel.DistributedDataParallel does, through dlrun's runtime:
    buckets reduced from the autograd hooks while backward runs (shared memory between the
    ranks of one host, Gloo or NCCL otherwise), and the stop vote carried with the last bucket.

    At construction every rank checks its parameters against rank 0's and takes rank 0's
    parameters and buffers. Move the model to ctx.device first. Call it like the model; its
    state_dict() is the model's (no 'module.' prefix). A forward pass in training mode with
    gradients on must be followed by one backward (on every rank); in eval mode or under
    torch.no_grad() nothing is reduced.

        with model.no_sync():            # accumulate: this backward is not reduced
            loss(model(x1)).backward()
        loss(model(x2)).backward()       # reduces the sum of both
    """

    def __init__(self, module, context=None, bucket_cap_mb=25.0, first_bucket_cap_mb=1.0):
        super().__init__()
        if not isinstance(module, torch.nn.Module):
            raise _dlrun.ConfigError(f"DataParallel wraps a torch.nn.Module, not a {type(module).__name__}")
        bucket_cap_mb = _arguments.real("bucket_cap_mb", bucket_cap_mb, positive=True)
        first_bucket_cap_mb = _arguments.real("first_bucket_cap_mb", first_bucket_cap_mb, positive=True)
        self.module = module
        self._context = _context.given_or_current(context)
        if self._context.world_size > 1:
            for name, sub in module.named_modules():
                if isinstance(sub, (torch.nn.Embedding, torch.nn.EmbeddingBag)) and sub.sparse:
                    raise _dlrun.ConfigError(
                        f"{name or 'the model'}: sparse gradients (sparse=True) are not reduced across ranks: "
                        f"make it with sparse=False (its gradient is then dense)")
        parameters = list(module.parameters())
        buffers = list(module.buffers())
        self._native = _dlrun.DataParallel(parameters, buffers, self._context._native, bucket_cap_mb,
                                           first_bucket_cap_mb)
        self._sync = True
        self._in_step = False
        # The version of a parameter after the last forward inside no_sync() (world of 2+), until
        # a synced forward: if it moved before the next forward, the optimizer stepped and applied
        # this rank's own gradient. Taken after the forward: one that changes a parameter in place
        # (a clamp, Embedding's max_norm) does not count.
        self._unreduced_version = None
        self._watched = next((p for p in parameters if p.requires_grad), None)
        _context._models.add(self)

    def forward(self, *args, **kwargs):
        self._finish_step()
        training = torch.is_grad_enabled() and self.training
        watch = training and self._context.world_size > 1
        if watch:
            self._check_unreduced_step()
        if training and self._sync:
            self._native.prepare_backward()
            self._in_step = True
        out = self.module(*args, **kwargs)
        if watch:
            self._unreduced_version = None if self._sync else self._watched._version
        return out

    def _check_unreduced_step(self):
        version, self._unreduced_version = self._unreduced_version, None
        if version is not None and self._watched._version != version:
            raise _dlrun.ConfigError(
                "DataParallel: the optimizer stepped after a backward inside no_sync() and before any backward "
                "outside it, so each rank applied its own gradient and the replicas have drifted apart: run each "
                "step's last backward outside no_sync() (it averages everything accumulated before it)")

    def _finish_step(self):
        # The step's stop vote (and, in a world of one, the local stop request) is read once
        # the step is done: at the next forward, or when the script asks for stop_requested().
        if self._in_step:
            self._in_step = False
            self._native.synchronize()
            self._native.finish_step()

    def _step_taken_over(self):
        # AdaptiveBatch.step() finishes this step (its vote) through the C++ DataParallel.
        self._in_step = False

    def no_sync(self):
        """A context manager: the backward passes inside only accumulate local gradients."""
        return _NoSync(self)

    def zero_grad(self, *args, **kwargs):
        """The module's zero_grad(), except in the middle of an AdaptiveDataLoader step's
        micro-batches, whose accumulated gradients it keeps (as optimizer.zero_grad() does)."""
        loader = getattr(self, "_dlrun_loader", None)
        loader = loader() if loader is not None else None
        if loader is not None and loader._keeps_gradients():
            return None
        return self.module.zero_grad(*args, **kwargs)

    def state_dict(self, *args, **kwargs):
        return self.module.state_dict(*args, **kwargs)

    def load_state_dict(self, state_dict, strict=True):
        return self.module.load_state_dict(state_dict, strict)

    @property
    def bucket_count(self):
        """How many gradient buckets the runtime reduces (0 in a world of one)."""
        return self._native.bucket_count()


class _NoSync:
    def __init__(self, owner):
        self._owner = owner
        self._guard = owner._native.no_sync()

    def __enter__(self):
        self._previous = self._owner._sync  # nested: the outer one's state comes back
        self._owner._sync = False
        self._guard.__enter__()
        return self

    def __exit__(self, *exc):
        self._guard.__exit__(*exc)
        self._owner._sync = self._previous
        return False
