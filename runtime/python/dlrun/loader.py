"""dlrun.ElasticDataLoader: batches whose position survives a restart at any number of ranks."""

import collections.abc
import contextlib
import math
import types
import warnings
import weakref

import torch
from torch.utils.data import TensorDataset
from torch.utils.data.dataloader import default_collate

from . import _arguments, _dlrun, context as _context


class ElasticDataLoader:
    """Iterates over this rank's share of each global batch of `batch_size` samples.

    Every epoch visits a permutation of the dataset that depends only on (seed, epoch); a step
    takes the next batch_size entries and splits them into contiguous per-rank shares (sizes
    differ by at most one). Its position is a global sample index, which the Checkpoint saves:
    a run resumed with another number of ranks continues at the same sample, so every sample
    of every epoch is trained exactly once. The last batch of an epoch is short, and a rank may
    get no sample in it: sum the loss over the rank's samples and multiply by loss_scale()
    (world_size / global batch) to get the mean over the global batch, as averaging over the
    ranks does.

        for epoch in loader.epochs(3):   # resumes mid-epoch after a restore()
            for x, y in loader:
                ...

    dataset: anything with __len__ and __getitem__ (a torch Dataset, or a tensor). collate_fn:
    as DataLoader's (default: torch's default_collate). Items are fetched in the training
    process (no worker processes).
    """

    def __init__(self, dataset, batch_size, *, seed=0, collate_fn=None, context=None):
        self.batch_size = _arguments.whole("batch_size", batch_size, 1)
        seed = _arguments.whole("seed", seed, 0, 2**64 - 1)
        self.collate_fn = _arguments.function("collate_fn", collate_fn) or default_collate
        if not (hasattr(dataset, "__len__") and hasattr(dataset, "__getitem__")):
            raise _dlrun.ConfigError(
                f"the dataset must have __len__ and __getitem__ (a map-style torch Dataset or a tensor), not "
                f"a {type(dataset).__name__}: a loader that resumes at a sample index needs to index its samples")
        if len(dataset) < 1:
            raise _dlrun.ConfigError("the dataset is empty")
        self.dataset = dataset
        self._context = _context.given_or_current(context)
        self.sampler = _dlrun.ElasticSampler(len(dataset), self._context._native, seed)
        self.batch = None  # the SampleBatch of the last step
        self.step = 0      # steps taken, over all epochs and restarts (a Checkpoint restores it)

    @property
    def epoch(self):
        return self.sampler.epoch

    @property
    def accumulating(self):
        """True while the batch just yielded is not its step's last micro-batch (only an
        AdaptiveDataLoader splits steps)."""
        return False

    def epochs(self, count):
        """Yields the epoch numbers from the current one (after a restore: the saved one) up to
        count - 1; iterate the loader once per epoch."""
        if count != math.inf:  # inf: until the script leaves the loop
            count = _arguments.whole("count", count, 0)
        while self.sampler.epoch < count:
            epoch = self.sampler.epoch
            yield epoch
            if self.sampler.epoch == epoch:
                raise RuntimeError(f"epoch {epoch} was left before its end: iterate the loader to its "
                                   "end once per epoch (a stop ends the script instead)")

    def __iter__(self):
        while True:
            batch = self.sampler.next(self._step_size())
            if batch is None:
                self.sampler.next_epoch()
                return
            self.batch = batch
            self.step += 1
            yield from self._yield_step(batch)

    def _step_size(self):
        return self.batch_size

    def _yield_step(self, batch):
        yield self._fetch(batch.indices)

    def _fetch(self, indices):
        # Tensors are indexed at once (no per-item __getitem__ and collate).
        if isinstance(self.dataset, torch.Tensor):
            return self.dataset[torch.tensor(indices, dtype=torch.long, device=self.dataset.device)]
        if isinstance(self.dataset, TensorDataset):
            index = torch.tensor(indices, dtype=torch.long)
            return tuple(t[index.to(t.device)] for t in self.dataset.tensors)
        if not indices:
            # No sample for this rank in an epoch's last batch: an empty batch shaped like one.
            empty = self.collate_fn([self.dataset[0]])
            return _take_none(empty)
        return self.collate_fn([self.dataset[i] for i in indices])

    def loss_scale(self):
        """world_size / the last step's global batch: a loss summed over this rank's samples
        times this is the global batch's mean once the ranks' gradients are averaged."""
        return self.batch.loss_scale(self._context.world_size) if self.batch else 0.0

    def __len__(self):
        """Steps in a whole epoch (at the current global batch)."""
        return (len(self.dataset) + self._step_size() - 1) // self._step_size()

    def checkpoint_state(self):
        return str(self.step).encode()

    def restore_checkpoint_state(self, data):
        self.step = int(data.decode())


def _take_none(batch):
    """A collated batch of one sample with that sample taken out: what a rank with no sample of
    an epoch's short last step trains on. A part that cannot be emptied is refused, not trained
    as the sample it holds."""
    if isinstance(batch, torch.Tensor) or (hasattr(batch, "shape") and hasattr(batch, "__getitem__")):
        return batch[:0]  # tensors, NumPy arrays
    if isinstance(batch, tuple) and hasattr(batch, "_fields"):  # a namedtuple
        return type(batch)(*(_take_none(b) for b in batch))
    if isinstance(batch, collections.abc.Mapping):  # dict, UserDict, Hugging Face's BatchEncoding
        emptied = {k: _take_none(v) for k, v in batch.items()}
        try:
            return type(batch)(emptied)
        except Exception:
            return emptied
    if isinstance(batch, (list, tuple)):
        if all(isinstance(b, (str, bytes)) for b in batch):
            return type(batch)()  # default_collate's list of the samples' strings
        return type(batch)(_take_none(b) for b in batch)
    raise _dlrun.ConfigError(
        f"this rank has no sample in this step (an epoch's last step has fewer samples than ranks), and the "
        f"collated batch holds a {type(batch).__name__}, which cannot be made empty: return tensors, NumPy "
        f"arrays, strings, or lists, tuples and mappings of them from collate_fn")


class AdaptiveDataLoader(ElasticDataLoader):
    """An ElasticDataLoader whose global batch dlrun's AdaptiveBatch chooses while training:
    the size with the highest goodput (throughput x statistical efficiency, from the measured
    step times and gradient noise scale, as AdaptDL/Pollux), the learning rate scaled to match
    (AdaScale for SGD, the square root of the batch scale for Adam-like optimizers). It is the C++
    runtime's AdaptiveBatch itself: the same decisions, metrics.jsonl and goodput-model.json
    (which the goodput scheduler reads), and its state in the Checkpoint that tracks the loader.

    model: the dlrun.DataParallel the batches train; optimizer: its torch.optim optimizer,
    whose learning rates are the ones for batch_size. The loader replaces the optimizer's
    step() and zero_grad() with ones that go through AdaptiveBatch: call them after every batch
    the loader yields, as in any loop. When a step is larger than max_micro_batch per rank,
    the loader yields it as several micro-batches; for all but the last, backward only
    accumulates and step()/zero_grad() do nothing. Sum the loss over the micro-batch and
    multiply by loss_scale(). Pass each micro-batch's loss to observe_loss() as well: with it
    (and noise_floor=True), a batch is also valued by the noise floor its rate per sample
    trains towards, so the batch keeps growing as the loss levels off (docs/adaptive.md).

    Options as AdaptiveBatchOptions (docs/adaptive.md): max_batch_size, min_micro_batch,
    max_micro_batch (0: max_batch_size / ranks), accumulation, scaling_rule ('auto',
    'adascale', 'linear', 'sqrt', 'adam', 'none'), replan_every (0: 25 on a GPU, 50 on the CPU), measure_every,
    min_improvement, noise_floor, log_every. clock: a function returning seconds, read to time the steps
    (tests give times of their choosing; default: a monotonic clock).
    """

    def __init__(self, dataset, batch_size, *, model, optimizer, max_batch_size=4096, min_micro_batch=1,
                 max_micro_batch=0, accumulation=True, scaling_rule="auto", replan_every=0, measure_every=4,
                 min_improvement=0.05, noise_floor=True, log_every=10, metrics_path="", seed=0, collate_fn=None, context=None,
                 clock=None):
        super().__init__(dataset, batch_size, seed=seed, collate_fn=collate_fn, context=context)
        from .parallel import DataParallel
        if not isinstance(model, DataParallel):
            raise _dlrun.ConfigError("AdaptiveDataLoader needs model= a dlrun.DataParallel")
        if not isinstance(optimizer, torch.optim.Optimizer):
            raise _dlrun.ConfigError(f"AdaptiveDataLoader needs optimizer= a torch.optim optimizer, not a "
                                     f"{type(optimizer).__name__}")
        if isinstance(optimizer, torch.optim.LBFGS):
            raise _dlrun.ConfigError("AdaptiveDataLoader cannot drive LBFGS: it evaluates its closure several "
                                     "times a step, and AdaptiveBatch takes one gradient per step (use "
                                     "dlrun.ElasticDataLoader with LBFGS)")
        owner = getattr(optimizer, "_dlrun_loader", None)
        if owner is not None and owner() is not None:
            raise _dlrun.ConfigError("this optimizer already belongs to another AdaptiveDataLoader")
        self.model = model
        self.optimizer = optimizer
        # The optimizer's own methods, as the class defines them (not a previous loader's).
        step = types.MethodType(type(optimizer).step, optimizer)
        self._zero_grad = types.MethodType(type(optimizer).zero_grad, optimizer)
        a = _arguments
        if a.whole("max_batch_size", max_batch_size, 1) < self.batch_size:
            raise _dlrun.ConfigError(f"max_batch_size ({max_batch_size}) is below batch_size ({self.batch_size}), the "
                                     f"initial batch: the batch can only grow from it")
        self.adaptive = _dlrun.AdaptiveBatch(
            self._context._native, model._native, optimizer, step, _kind(optimizer), self.batch_size,
            a.whole("max_batch_size", max_batch_size, 1), a.whole("min_micro_batch", min_micro_batch, 1),
            a.whole("max_micro_batch", max_micro_batch, 0), a.flag("accumulation", accumulation),
            a.text("scaling_rule", scaling_rule), a.whole("replan_every", replan_every, 0),
            a.whole("measure_every", measure_every, 1), a.real("min_improvement", min_improvement, 0.0, finite=False),
            a.flag("noise_floor", noise_floor), a.whole("log_every", log_every, 0),
            a.path("metrics_path", metrics_path or ""), a.function("clock", clock))
        self._accumulating = False
        self._warned_new_groups = False
        self._step_applied = True  # the step under way has had its optimizer step
        self._parts_accumulated = 0  # micro-batches of the step under way already accumulated
        # model.zero_grad() in the middle of a step must keep what was accumulated, as
        # optimizer.zero_grad() does (the model reaches the loader by a weak reference).
        model._dlrun_loader = weakref.ref(self)
        # Methods of the optimizer instance (LR schedulers wrap optimizer.step and expect that),
        # reaching the loader by a weak reference (no cycle keeps either alive).
        optimizer._dlrun_loader = weakref.ref(self)
        optimizer.step = types.MethodType(_adaptive_step, optimizer)
        optimizer.zero_grad = types.MethodType(_adaptive_zero_grad, optimizer)

    @property
    def accumulating(self):
        return self._accumulating

    @property
    def global_batch(self):
        """The global batch of the next step."""
        return self.adaptive.shape()[0]

    def shape(self):
        """(global batch, micro-batch per rank, micro-steps per step) of the next step."""
        return self.adaptive.shape()

    def observe_loss(self, loss):
        """The loss of the micro-batch just trained (the tensor passed to backward, or its value
        as a number): the step's loss is the sum of those observed. A tensor is read back once
        per decision, not per step."""
        if isinstance(loss, torch.Tensor):
            if loss.numel() != 1:
                raise _dlrun.ConfigError(
                    f"observe_loss takes the micro-batch's loss, one number, not a tensor of shape "
                    f"{tuple(loss.shape)}: pass the loss you call backward() on (reduction 'sum' or 'mean')")
        else:
            loss = torch.tensor(_arguments.real("loss", loss, finite=False, nan=True), dtype=torch.float64)
        self.adaptive.observe_loss(loss)

    def stats(self):
        """What the last step measured and decided: step, progress, gain, lr_factor, noise_scale,
        efficiency, samples_per_sec, goodput, measure_every, loss (the mean over the last
        decision interval) and noise_floor."""
        return self.adaptive.stats()

    def progress(self):
        """Scale-invariant progress (the sum of what each step is worth in initial-batch steps:
        its gain, or sqrt(gain * scale) for an adaptive optimizer under the adam or sqrt rule):
        use it for schedules."""
        return self.adaptive.progress()

    def set_base_lr(self, lr):
        """The learning rate for batch_size, every parameter group's (e.g. from a schedule on
        progress()); each step applies it times the scaling rule's factor. The same as writing it
        into each of the optimizer's param_groups, as a torch LR scheduler does."""
        lr = _arguments.real("lr", lr, minimum=0.0)
        self.adaptive.set_base_lr(lr)
        for group in self.optimizer.param_groups:
            group["lr"] = lr

    def restore_checkpoint_state(self, data):
        super().restore_checkpoint_state(data)
        # AdaptiveBatch's state (restored before this) holds the base rates: the optimizer's
        # groups hold them between steps (a checkpoint of a version that kept the scaled rate in
        # the groups would otherwise be scaled twice).
        for group, lr in zip(self.optimizer.param_groups, self.adaptive.base_lrs()):
            group["lr"] = lr

    def _step_size(self):
        return self.global_batch

    def _yield_step(self, batch):
        parts = self.adaptive.split(batch.indices)
        self._step_applied = False
        for i, part in enumerate(parts):
            self._accumulating = i + 1 < len(parts)
            try:
                # An accumulated micro-batch's backward is not reduced: the model's no_sync().
                with self.model.no_sync() if self._accumulating else contextlib.nullcontext():
                    yield self._fetch(part)
            except GeneratorExit:
                # The loop was left before the step's optimizer step: the step did not happen.
                if not self._step_applied:
                    self._drop_step(batch)
                self._parts_accumulated = 0
                raise
            finally:
                # The loop body has run (or the loop was left mid-step): step normally again.
                self._accumulating = False

    def _drop_step(self, batch):
        """A step left before it was applied (a break on its first micro-batches): its samples
        go back to the sampler and its step count with them, so that a checkpoint saved now
        resumes with them, and the gradients it accumulated are dropped."""
        self.sampler.rewind_to(batch.first_position)
        self.step -= 1
        self._zero_grad()

    def _keeps_gradients(self):
        """Whether zeroing the gradients now would lose micro-batches this step accumulated:
        zero_grad() at the top of the loop comes after the first micro-batch's backward."""
        return self._parts_accumulated > 0

    def _optimizer_step(self):
        if self._step_applied and not self._accumulating:
            # AdaptiveBatch would time, measure and size batches that some other loop trains.
            raise _dlrun.ConfigError(
                "optimizer.step() came with no batch from its AdaptiveDataLoader since the last step: step once "
                "for each batch the loader yields (for x, y in loader: ... optimizer.step()); the loader sizes "
                "the batches it yields, not another loader's")
        if self._accumulating:
            self.adaptive.accumulated()
            self._parts_accumulated += 1
            return
        self.model._step_taken_over()  # AdaptiveBatch.step reads the step's stop vote itself
        self._parts_accumulated = 0
        # Between steps the groups hold the rates for batch_size, which a torch LR scheduler (made
        # before the loader or after) reads and writes, and set_base_lr sets: each step trains at
        # them times the scaling rule's factor, then puts them back.
        groups = self.optimizer.param_groups
        known = len(self.adaptive.base_lrs())
        if len(groups) > known and not self._warned_new_groups:
            self._warned_new_groups = True
            warnings.warn(f"the optimizer has {len(groups)} parameter groups, {known} when its AdaptiveDataLoader "
                          "was made: the later ones train at their own rate, unscaled, and their gradients do "
                          "not count in the noise scale (add every group before making the loader)", stacklevel=4)
        rates = [group["lr"] for group in groups[:known]]
        self.adaptive.set_base_lrs([float(lr) for lr in rates])
        try:
            self.adaptive.step(self.batch.global_size if self.batch else -1)
        finally:
            for group, lr in zip(groups, rates):
                group["lr"] = lr
        self._step_applied = True


def _loader_of(optimizer):
    loader = optimizer._dlrun_loader()
    if loader is None:
        raise _dlrun.ConfigError("the AdaptiveDataLoader of this optimizer is gone")
    return loader


def _adaptive_step(optimizer, closure=None):
    """optimizer.step() through AdaptiveBatch (nothing for an accumulated micro-batch). A closure
    is evaluated first, as torch's optimizers do (it runs the micro-batch's forward and backward),
    and its loss returned."""
    loader = _loader_of(optimizer)
    loss = None
    if closure is not None:
        with torch.enable_grad():
            loss = closure()
    # What a torch LR scheduler's wrapper of step() counts (the wrapper is replaced when the
    # scheduler was made before the loader): without it the scheduler warns that its step()
    # came before the optimizer's.
    optimizer._step_count = getattr(optimizer, "_step_count", 0) + 1
    optimizer._opt_called = True
    loader._optimizer_step()
    return loss


# The marks of a step an LR scheduler can follow: torch 1.x's and 2.x's.
_adaptive_step._with_counter = True
_adaptive_step._wrapped_by_lr_sched = True


def _adaptive_zero_grad(optimizer, *args, **kwargs):
    """optimizer.zero_grad(), except in the middle of a step's micro-batches: at the loop's end
    after an accumulated one, or at its top after the first (the order PyTorch's tutorials use)."""
    loader = _loader_of(optimizer)
    if not loader._keeps_gradients():
        loader._zero_grad(*args, **kwargs)


def _kind(optimizer):
    if isinstance(optimizer, (torch.optim.Adam, torch.optim.AdamW)):
        return "adam"
    if isinstance(optimizer, (torch.optim.RMSprop, torch.optim.Adagrad, torch.optim.Adadelta, torch.optim.Adamax,
                              torch.optim.NAdam, torch.optim.RAdam)):
        return "adaptive"
    return "sgd"
