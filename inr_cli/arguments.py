"""The Python API's arguments, checked where they come in: a wrong type or value is one InrError
that is also the built-in error a Python user catches for it (errors.py: TypeError, ValueError,
IndexError, KeyError), with one message that names the argument, never a NumPy error from deep
inside."""

from __future__ import annotations

import math
import numbers
import os
from pathlib import Path

import numpy as np

from inr_cli.errors import ArgumentTypeError, ArgumentValueError, IndexOutOfRange

FLOAT32_MAX = float(np.finfo(np.float32).max)


def _shown(value) -> str:
    """The value as a message shows it: one line, short, its type first."""
    if isinstance(value, str):
        return repr(value[:60])
    if isinstance(value, np.ndarray):
        return f"an array of shape {list(value.shape)}"
    return f"{type(value).__name__} {' '.join(repr(value).split())[:40]}"


def path(value, name: str) -> Path:
    """A file or folder: a str or an os.PathLike, not empty, without NUL."""
    if not isinstance(value, (str, os.PathLike)):
        raise ArgumentTypeError(f"{name} is a path (a str or a pathlib.Path), got {_shown(value)}")
    text = os.fspath(value)
    if not isinstance(text, str) or not text:
        raise ArgumentValueError(f"{name} is a path, got {_shown(value)}")
    if "\0" in text:  # no file can be named so: the system refuses it wherever it is used
        raise ArgumentValueError(f"{name} holds a NUL character, which no file name can: got {_shown(text)}")
    return Path(text)


def optional_path(value, name: str) -> Path | None:
    return None if value is None else path(value, name)


def whole(value, name: str, least: int | None = None) -> int:
    """An integer (a Python or NumPy one, not a bool), at least `least`."""
    if isinstance(value, (bool, np.bool_)) or not isinstance(value, numbers.Integral):
        raise ArgumentTypeError(f"{name} is a whole number, got {_shown(value)}")
    if least is not None and value < least:
        raise ArgumentValueError(f"{name} must be at least {least}, got {value}")
    return int(value)


def optional_whole(value, name: str, least: int | None = None) -> int | None:
    return None if value is None else whole(value, name, least)


def number(value, name: str, above: float | None = None, below: float | None = None) -> float:
    """A finite real number (not a bool), strictly between `above` and `below` where given."""
    if isinstance(value, (bool, np.bool_)) or not isinstance(value, numbers.Real) or not math.isfinite(value):
        raise ArgumentTypeError(f"{name} is a finite number, got {_shown(value)}")
    if (above is not None and value <= above) or (below is not None and value >= below):
        span = f"between {above:g} and {below:g}" if above is not None and below is not None else \
            f"above {above:g}" if above is not None else f"below {below:g}"
        raise ArgumentValueError(f"{name} must be {span}, got {value:g}")
    return float(value)


def optional_real(value, name: str) -> float | None:
    """A real number of any value (not a bool), or None: its range is for the caller to say."""
    if value is not None and (isinstance(value, (bool, np.bool_)) or not isinstance(value, numbers.Real)):
        raise ArgumentTypeError(f"{name} is a number, got {_shown(value)}")
    return None if value is None else float(value)


def flag(value, name: str) -> bool:
    if not isinstance(value, (bool, np.bool_)):
        raise ArgumentTypeError(f"{name} is True or False, got {_shown(value)}")
    return bool(value)


def choice(value, name: str, choices) -> object:
    """One of `choices` (str or int ones): a NumPy integer is the int it holds, a bool none of them."""
    if isinstance(value, numbers.Integral) and not isinstance(value, (bool, np.bool_)):
        value = int(value)
    if not isinstance(value, (str, int)) or isinstance(value, bool) or value not in choices:
        raise ArgumentValueError(f"{name} is one of {', '.join(map(str, choices))}, got {_shown(value)}")
    return value


def optional_text(value, name: str) -> str | None:
    if value is not None and not isinstance(value, str):
        raise ArgumentTypeError(f"{name} is a str, got {_shown(value)}")
    return value


def sequence(value, name: str, length: int | None = None) -> list:
    """A list, a tuple or a 1-D array of items; a str is one item, not a sequence of letters."""
    if isinstance(value, (str, bytes)) or not isinstance(value, (list, tuple, np.ndarray, range)):
        raise ArgumentTypeError(f"{name} is a list (or tuple) of names, got {_shown(value)}")
    items = list(np.asarray(value).ravel()) if isinstance(value, np.ndarray) else list(value)
    if length is not None and len(items) != length:
        raise ArgumentValueError(f"{name} must have {length} items, one per network, got {len(items)}")
    return items


def names(value, name: str) -> list[str]:
    """Names (class names): each a str or a whole number, as index.csv's labels are."""
    items = sequence(value, name)
    bad = next((item for item in items if isinstance(item, bool) or not isinstance(item, (str, numbers.Integral))),
               None)
    if bad is not None:
        raise ArgumentTypeError(f"{name} holds {_shown(bad)}; names are str")
    return [str(item) for item in items]


def real_array(value, name: str) -> np.ndarray:
    """An array of real numbers (integers or floats, of any width), as given: one of text, of
    complex numbers (NumPy would drop their imaginary parts), of bools or of objects that are not
    numbers (None, which NumPy would make NaN) is refused by its dtype. An object array of real
    numbers (Fraction, say) is their float64 array."""
    if value is None or isinstance(value, (str, bytes)):  # NumPy would make a 0-d array of it, or fail later
        raise ArgumentTypeError(f"{name} is an array of numbers, got {_shown(value)}")
    try:
        array = np.asarray(value)
    except (TypeError, ValueError) as exc:  # a ragged list, an object NumPy cannot hold
        raise ArgumentTypeError(f"{name} is an array of numbers, got {_shown(value)} ({exc})") from None
    if array.dtype.kind == "O":
        bad = [item for item in array.flat if isinstance(item, (bool, np.bool_)) or
               not isinstance(item, numbers.Real)]
        if bad:  # None among them: NumPy's float would be NaN
            raise ArgumentTypeError(f"{name} is an array of numbers; this one, of dtype object, holds "
                                    f"{_shown(bad[0])}, which is not a number")
        try:
            array = array.astype(np.float64)
        except OverflowError:  # an int of more digits than a float holds
            raise ArgumentValueError(f"{name} holds a number beyond a float's range") from None
    if array.dtype.kind == "c":
        raise ArgumentTypeError(f"{name} is an array of real numbers, got one of dtype {array.dtype}: complex "
                                f"values are not taken (give their .real or abs())")
    if array.dtype.kind not in "iuf":
        raise ArgumentTypeError(f"{name} is an array of numbers, got one of dtype {array.dtype}")
    return array


def float_array(value, name: str, shape: tuple | None = None) -> np.ndarray:
    """A finite float32 array (of `shape` where given: None in it for any length), from an array of
    real numbers (real_array). Checked in its own type: a wider float beyond float32's range, which
    the cast would make infinite (with NumPy's overflow warning), is refused as such."""
    array = real_array(value, name)
    if shape is not None and (array.ndim != len(shape) or any(want is not None and got != want
                                                             for got, want in zip(array.shape, shape))):
        expected = "[" + ", ".join("n" if want is None else str(want) for want in shape) + "]"
        raise ArgumentValueError(f"{name} of shape {list(array.shape)}: expected {expected}")
    if not np.isfinite(array).all():
        raise ArgumentValueError(f"{name} holds NaN or infinite values")
    if array.dtype.kind == "f" and array.dtype.itemsize > 4 and array.size and np.abs(array).max() > FLOAT32_MAX:
        largest = float(array.flat[int(np.argmax(np.abs(array)))])
        raise ArgumentValueError(f"{name} holds {largest:g}, beyond float32's range (at most {FLOAT32_MAX:.4g} "
                                 f"either way)")
    return array.astype(np.float32, copy=False)


def index(value, name: str, length: int) -> int:
    """A position in a sequence of `length` (negative from the end)."""
    position = whole(value, name)
    if not -length <= position < length:
        raise IndexOutOfRange(f"{name} {position} is out of range: there are {length}")
    return position % length
