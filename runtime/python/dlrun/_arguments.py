"""The Python API's arguments, checked where the script passes them.

A value of the wrong type or out of range is a ConfigError that names the argument and shows
the value, instead of a TypeError from the bindings that lists their C++ signature, a string
"false" taken as True, or 64.9 silently trained as 64.
"""

import math
import operator
import os

from . import _dlrun


def _shown(value):
    text = repr(value)
    if len(text) > 60:
        text = text[:57] + "..."
    return f"{text} ({type(value).__name__})"


def _fail(name, what, value):
    raise _dlrun.ConfigError(f"{name} must be {what}, not {_shown(value)}")


def _is_bool(value):
    # Python's and NumPy's (numpy.bool_ still converts to an index, with a warning).
    return isinstance(value, bool) or type(value).__name__ == "bool_"


def whole(name, value, minimum=None):
    """An int: ints (NumPy's and 0-d integer tensors too) and floats with no fraction."""
    if not _is_bool(value):
        try:
            number = operator.index(value)
        except TypeError:
            number = None
            if isinstance(value, float) and value.is_integer():
                number = int(value)
        if number is not None:
            if minimum is not None and number < minimum:
                _fail(name, f"at least {minimum}", value)
            return number
    _fail(name, "a whole number" if minimum is None else f"a whole number, at least {minimum}",
          value)


def real(name, value, minimum=None, positive=False):
    """A float from any finite real number (not a string, not a bool)."""
    if not (_is_bool(value) or isinstance(value, (str, bytes))):
        try:
            number = float(value)
        except (TypeError, ValueError):
            number = None
        if number is not None and not math.isfinite(number):
            _fail(name, "a finite number", value)
        if number is not None:
            if positive and not number > 0:
                _fail(name, "a positive number", value)
            if minimum is not None and number < minimum:
                _fail(name, f"at least {minimum}", value)
            return number
    _fail(name, "a positive number" if positive else "a number", value)


def flag(name, value):
    """True or False (1 and 0 too, as Python counts them); never a string such as "false"."""
    if _is_bool(value):
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
    """A file system path: a string or an os.PathLike (pathlib.Path)."""
    try:
        out = os.fspath(value)
    except TypeError:
        out = None
    if isinstance(out, str):
        return out
    _fail(name, "a path (a string or a pathlib.Path)", value)


def function(name, value):
    """None or a callable."""
    if value is None or callable(value):
        return value
    _fail(name, "a function (or None)", value)
