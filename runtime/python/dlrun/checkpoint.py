"""dlrun.Checkpoint: everything a run needs to continue exactly, written atomically."""

import io
import os
import re

import torch

from . import _arguments, _dlrun, context as _context
from .loader import AdaptiveDataLoader, ElasticDataLoader


class Checkpoint:
    """Saves and restores the tracked objects as one directory per step, through dlrun's C++
    Checkpoint: rank 0 writes it under a temporary name, fsyncs every file, writes a MANIFEST of
    sizes and CRC-32s and renames it into place; the last keep_last are kept. restore() loads the
    newest checkpoint whose MANIFEST matches its files, skipping a damaged one with a warning.

    track: models (torch.nn.Module or dlrun.DataParallel), optimizers, one ElasticDataLoader or
    AdaptiveDataLoader (its position and step count), and anything with state_dict()/load_state_dict() (learning-rate
    schedulers, GradScaler) or checkpoint_state() -> bytes / restore_checkpoint_state(bytes).
    directory: default $DLRUN_CHECKPOINT_DIR (a job file's checkpoint_dir), else
    RUN_DIR/checkpoints under dlrun ($DLRUN_RUN_DIR), else ./checkpoints.

    save() and restore() are collective: every rank calls them at the same point.
    """

    def __init__(self, track, directory=None, keep_last=3, context=None):
        if not isinstance(track, (list, tuple)):
            raise _dlrun.ConfigError(f"Checkpoint takes a list of what to track, e.g. Checkpoint([model, optimizer, "
                                     f"loader]), not a {type(track).__name__}")
        self._context = _context.given_or_current(context)
        if directory is None:
            directory = self._context.checkpoint_dir or os.path.join(".", "checkpoints")
        self.directory = _arguments.path("directory", directory)
        self._native = _dlrun.Checkpoint(self._context._native, self.directory,
                                         _arguments.whole("keep_last", keep_last, 1, 2**31 - 1))
        self._loader = None
        self._objects = []  # kept alive as long as the checkpoint
        names = set()
        for obj in track:
            name, state = self._adapt(obj)
            base, n = name, 1
            while name in names:
                n += 1
                name = f"{base}{n}"
            names.add(name)
            if isinstance(obj, ElasticDataLoader):
                if self._loader is not None:
                    raise _dlrun.ConfigError("a Checkpoint tracks one data loader (the training one); "
                                             "evaluation loaders need no position")
                self._native.track_sampler(obj.sampler)
                self._loader = obj
            if isinstance(obj, AdaptiveDataLoader):
                self._native.track_adaptive(name + "-adaptive", obj.adaptive)
            self._objects.append(state)
            self._native.track_object(name, state)

    def _adapt(self, obj):
        device = self._context.device
        if isinstance(obj, ElasticDataLoader):
            return "loader", obj
        if isinstance(obj, torch.nn.Module):
            return "model", _StateDict(obj, device)
        if isinstance(obj, torch.optim.Optimizer):
            return "optimizer", _StateDict(obj, device)
        if hasattr(obj, "checkpoint_state") and hasattr(obj, "restore_checkpoint_state"):
            return _name_of(obj), _BytesState(obj)
        if hasattr(obj, "state_dict") and hasattr(obj, "load_state_dict"):
            return _name_of(obj), _StateDict(obj, device)
        raise _dlrun.ConfigError(f"Checkpoint cannot track a {type(obj).__name__}: give it models, optimizers, "
                                 "ElasticDataLoaders, or objects with state_dict()/load_state_dict()")

    def save(self, step=None, **values):
        """Writes a checkpoint of `step` (default: the tracked loader's step count) with the
        given float values (e.g. loss=0.3); returns its directory. Raises CheckpointError."""
        _context._finish_steps()
        if step is None:
            if self._loader is None:
                raise _dlrun.ConfigError("Checkpoint.save() needs step= when no ElasticDataLoader is tracked")
            step = self._loader.step
        step = _arguments.whole("step", step, 0)
        return self._native.save(step, {k: _checkpoint_value(k, v) for k, v in values.items()})

    def restore(self):
        """Loads the newest valid checkpoint into the tracked objects. Returns its info (.step,
        .values, .saved_world_size, .path), or None when there is none yet. Raises
        CheckpointError when checkpoints exist but none can be loaded."""
        return self._native.restore()


class _BytesState:
    """A checkpoint_state()/restore_checkpoint_state() object whose state is checked to be bytes
    (anything else failed as "Unable to cast Python instance to C++ type")."""

    def __init__(self, obj):
        self._obj = obj

    def checkpoint_state(self):
        data = self._obj.checkpoint_state()
        if not isinstance(data, (bytes, bytearray, memoryview)):
            raise _dlrun.ConfigError(f"{type(self._obj).__name__}.checkpoint_state() must return bytes, not "
                                     f"{data!r:.60} ({type(data).__name__})")
        return bytes(data)

    def restore_checkpoint_state(self, data):
        self._obj.restore_checkpoint_state(data)


class _StateDict:
    """A state_dict()/load_state_dict() object as checkpoint bytes (torch.save)."""

    def __init__(self, obj, device):
        self._obj = obj.module if hasattr(obj, "_native") and hasattr(obj, "module") else obj
        self._device = device

    def checkpoint_state(self):
        buffer = io.BytesIO()
        torch.save(self._obj.state_dict(), buffer)
        return buffer.getvalue()

    def check_checkpoint_state(self, data):
        # Asked before any tracked object is restored: a model's state that does not fit it
        # refuses the whole restore while nothing has changed. What was read is kept for the
        # restore that follows (read once).
        self._checked = None
        if isinstance(self._obj, torch.nn.Module):
            state = torch.load(io.BytesIO(data), map_location=self._device)
            _check_fits(self._obj, state)
            self._checked = (data, state)

    def restore_checkpoint_state(self, data):
        checked, self._checked = getattr(self, "_checked", None), None
        state = checked[1] if checked is not None and checked[0] == data else \
            torch.load(io.BytesIO(data), map_location=self._device)
        if isinstance(self._obj, torch.nn.Module):
            _check_fits(self._obj, state)
        self._obj.load_state_dict(state)


def _check_fits(module, state):
    """Raises before anything is loaded when a module's checkpoint does not fit it: torch's
    load_state_dict copies every tensor that fits before it raises for the others, which left a
    model half restored."""
    full = module.state_dict()
    mine = {k: v for k, v in full.items() if not _lazy(v)}  # a lazy one takes the checkpoint's shape
    missing = [k for k in full if k not in state]
    unexpected = [k for k in state if k not in full]
    shapes = [f"'{k}' is {'x'.join(map(str, state[k].shape))} there, {'x'.join(map(str, v.shape))} here"
              for k, v in mine.items() if k in state and hasattr(state[k], "shape") and state[k].shape != v.shape]
    problems = ([f"no {', '.join(repr(k) for k in missing[:5])}" + (" …" if len(missing) > 5 else "")] if missing else []) + \
               ([f"{', '.join(repr(k) for k in unexpected[:5])} not in this model" + (" …" if len(unexpected) > 5 else "")]
                if unexpected else []) + shapes[:5]
    if problems:
        raise _dlrun.CheckpointError(f"the checkpoint's {type(module).__name__} does not fit this one: " +
                                     "; ".join(problems))


def _lazy(tensor):
    is_lazy = getattr(torch.nn.parameter, "is_lazy", None)
    return is_lazy is not None and is_lazy(tensor)


def _checkpoint_value(name, value):
    # Any number, NaN and infinities included (a diverged loss is still worth saving), and flags.
    if _arguments.is_bool(value):
        return float(bool(value))
    return _arguments.real(f"the checkpoint value {name}", value, finite=False, nan=True)


def _name_of(obj):
    return re.sub(r"[^A-Za-z0-9_-]", "_", type(obj).__name__.lower()) or "object"
