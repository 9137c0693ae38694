"""dlrun.init() and the Context it returns: this process's place in the training world."""

import inspect
import weakref

import torch

from . import _arguments, _dlrun

_current = None
# The DataParallel models whose last step may still have a stop vote in flight: asking for
# the stop request (or saving a checkpoint) finishes their step first.
_models = weakref.WeakSet()


class Context:
    """This process's rank and world, and dlrun's stop protocol.

    Attributes: rank, world_size, local_rank, nodes, restart_count (0 on the first start, +1
    on every restart by dlrun), run_dir ('' when not started by dlrun), checkpoint_dir (where
    the job's checkpoints belong: $DLRUN_CHECKPOINT_DIR, else RUN_DIR/checkpoints, else ''),
    backend ('gloo', 'nccl', or 'none' for a world of one), device ('cpu' or 'cuda:N': where
    this rank's model and batches belong).

    SIGTERM, SIGINT, SIGHUP or SIGUSR1 to any rank (dlrun sends SIGTERM to stop or resize a job) is a
    stop request. It travels with the next step's gradients, so stop_requested() turns true on
    every rank after the same step: save a checkpoint then and exit with exit_code() (75, "resume
    me from the checkpoint").
    """

    def __init__(self, native):
        self._native = native

    def __getattr__(self, name):
        return getattr(self._native, name)

    def stop_requested(self):
        """True once every rank agreed to stop (after the same step on every rank). The vote
        travels with a DataParallel step; a loop without one asks poll_stop() instead."""
        _finish_steps()
        return self._native.stop_requested()

    def exit_code(self):
        """What the script should exit with after a stop: 75, or 0 when no stop was agreed."""
        _finish_steps()
        return self._native.exit_code()

    def all_reduce_sum(self, values):
        """The sum over the ranks, one collective: of a list (or tuple) of numbers, as a list of
        floats; of a tensor, as a new tensor of its shape, dtype and device (summed in float64:
        whole numbers beyond 2**53 lose digits); of one number, as a float."""
        if isinstance(values, torch.Tensor):
            flat = values.detach().to("cpu", torch.float64).reshape(-1).tolist()
            summed = torch.tensor(self._native.all_reduce_sum(flat), dtype=torch.float64)
            return summed.reshape(values.shape).to(dtype=values.dtype, device=values.device)
        if isinstance(values, (list, tuple)):
            return self._native.all_reduce_sum(
                [_arguments.real(f"values[{i}]", v, finite=False, nan=True) for i, v in enumerate(values)])
        return self._native.all_reduce_sum([_arguments.real("values", values, finite=False, nan=True)])[0]

    def broadcast(self, value):
        """Rank 0's whole number, on every rank."""
        return self._native.broadcast(_arguments.whole("value", value))

    def __repr__(self):
        return (f"dlrun.Context(rank={self.rank}, world_size={self.world_size}, backend={self.backend!r}, "
                f"device={self.device!r}, restart_count={self.restart_count})")


def _finish_steps():
    for model in list(_models):
        model._finish_step()


def init(*, rendezvous_timeout=60.0, collective_timeout=600.0, backend="auto", device="auto",
         handle_signals=True, shared_memory_allreduce=True):
    """Joins the training world dlrun's environment describes (RANK, WORLD_SIZE, MASTER_ADDR,
    MASTER_PORT, LOCAL_RANK, DLRUN_RUN_DIR, DLRUN_RESTART_COUNT); without it, a world of one.

    rendezvous_timeout, collective_timeout: seconds, from 0.001 to 2592000 (30 days). backend: 'auto' (NCCL on a GPU when built
    with it, otherwise Gloo), 'gloo' or 'nccl'. device: 'auto' (what dlrun started the rank as),
    'cpu' or 'cuda'. handle_signals: install the stop handlers. shared_memory_allreduce: average
    CPU gradients of ranks on one host through shared memory instead of Gloo's sockets.

    Raises EnvironmentError for a half-set environment, RendezvousTimeout when the ranks do
    not meet in time. A second call returns the first Context; one that asks for something else
    than the first (an argument other than its default and than the first call's) is a
    ConfigError, since the world it asks for is not the one it would get.
    """
    global _current, _current_arguments
    a = _arguments
    arguments = {
        "rendezvous_timeout": a.real("rendezvous_timeout", rendezvous_timeout, positive=True),
        "collective_timeout": a.real("collective_timeout", collective_timeout, positive=True),
        "backend": a.text("backend", backend),
        "device": a.text("device", device),
        "handle_signals": a.flag("handle_signals", handle_signals),
        "shared_memory_allreduce": a.flag("shared_memory_allreduce", shared_memory_allreduce),
    }
    if _current is None:
        _current = Context(_dlrun.init(*arguments.values()))
        _current_arguments = arguments
        return _current
    differ = [f"{name}={value!r} (the first call's: {_current_arguments[name]!r})"
              for name, value in arguments.items()
              if value != _INIT_DEFAULTS[name] and value != _current_arguments[name] and not _has(name, value)]
    if differ:
        first = ("was called before" if not _implicit_init else
                 "was called before, by dlrun itself when a dlrun object was made without a context (call "
                 "dlrun.init(...) before making it)")
        raise _dlrun.ConfigError(f"dlrun.init() {first}, and a second call cannot change the world it made: " +
                                 ", ".join(differ) + ". Pass these to the first call; dlrun.init() with no "
                                 "arguments returns the Context it made")
    return _current


def _has(name, value):
    """Whether the Context made has what `value` asks for anyway ('cpu' when 'auto' gave cpu)."""
    if name == "backend":  # a world of one on the CPU has none, where Gloo was asked for
        return value == _current.backend or (value == "gloo" and _current.backend == "none")
    if name == "device":
        return value == _current.device.split(":")[0]
    return False


_INIT_DEFAULTS = {name: parameter.default for name, parameter in
                  inspect.signature(init).parameters.items()}
_current_arguments = {}
_implicit_init = False  # the first init() was current()'s, for an object made without a context


def given_or_current(context):
    """`context`, a dlrun.Context, or current() when it is None."""
    if context is None:
        return current()
    if not isinstance(context, Context):
        raise _dlrun.ConfigError(f"context must be a dlrun.Context (what dlrun.init() returns), not "
                                 f"{context!r} ({type(context).__name__})")
    return context


def current():
    """The Context of init(), initialising a default one when init() was not called."""
    global _implicit_init
    if _current is None:
        init()
        _implicit_init = True
    return _current
