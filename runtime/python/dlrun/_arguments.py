"""The Python API's arguments, checked where the script passes them.

A value of the wrong type or out of range is a ConfigError that names the argument and shows
the value, instead of a TypeError from the bindings that lists their C++ signature, a string
"false" taken as True, or 64.9 silently trained as 64.
"""

import math
import operator
import os

from . import _dlrun

INT64_MAX = 2**63 - 1


def _shown(value):
    text = repr(value)
    if len(text) > 60:
        text = text[:57] + "..."
    return f"{text} ({type(value).__name__})"


def _fail(name, what, value):
    raise _dlrun.ConfigError(f"{name} must be {what}, not {_shown(value)}")


def is_bool(value):
    """Python's, NumPy's (numpy.bool_, numpy.bool in NumPy 2) and a 0-d torch.bool tensor."""
    if isinstance(value, bool):
        return True
    kind = type(value)
    if kind.__module__ == "numpy" and kind.__name__ in ("bool_", "bool"):
        return True
    return str(getattr(value, "dtype", "")) == "torch.bool" and tuple(getattr(value, "shape", (0,))) == ()


def _as_float(value):
    """float(value) for a number (not a string or bytes), or None."""
    if isinstance(value, (str, bytes)):
        return None
    try:
        return float(value)
    except (TypeError, ValueError, OverflowError):
        return None


def whole(name, value, minimum=None, maximum=INT64_MAX):
    """An int: ints (NumPy's and 0-d integer tensors too) and numbers with no fraction."""
    number = None
    if not is_bool(value):
        try:
            number = operator.index(value)
        except TypeError:
            real_value = _as_float(value)
            if real_value is not None and real_value.is_integer():
                number = int(real_value)
    if number is None:
        _fail(name, "a whole number" if minimum is None else f"a whole number, at least {minimum}", value)
    if minimum is not None and number < minimum:
        _fail(name, f"at least {minimum}", value)
    if number > maximum:
        _fail(name, f"at most {maximum}", value)
    return number


def real(name, value, minimum=None, positive=False, finite=True, nan=False):
    """A float from any real number (not a string, not a bool); finite unless finite=False,
    never NaN unless nan=True."""
    number = None if is_bool(value) else _as_float(value)
    if number is None or (math.isnan(number) and not nan):
        _fail(name, "a positive number" if positive else "a number", value)
    if math.isnan(number):
        return number
    if finite and not math.isfinite(number):
        _fail(name, "a finite number", value)
    if positive and not number > 0:
        _fail(name, "a positive number", value)
    if minimum is not None and number < minimum:
        _fail(name, f"at least {minimum}", value)
    return number


def flag(name, value):
    """True or False (1 and 0 too, as Python counts them); never a string such as "false"."""
    if is_bool(value):
        return bool(value)
    try:
        number = operator.index(value)
    except TypeError:
        number = None
    if number in (0, 1):
        return bool(number)
    _fail(name, "True or False", value)


def text(name, value):
    if isinstance(value, str):
        return value
    _fail(name, "a string", value)


def path(name, value):
    """A file system path: a string, bytes or an os.PathLike (pathlib.Path)."""
    try:
        return os.fsdecode(value)
    except TypeError:
        _fail(name, "a path (a string or a pathlib.Path)", value)


def function(name, value):
    """None or a callable."""
    if value is None or callable(value):
        return value
    _fail(name, "a function (or None)", value)
