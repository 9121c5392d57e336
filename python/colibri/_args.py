"""Argument checks and conversions shared by the wrappers: wrong types raise TypeError and
out-of-range values ValueError in Python, before anything reaches C; accepted values come back
in the form the C call takes (ints in range, UTF-8 bytes, ctypes arrays)."""

from __future__ import annotations

import ctypes
import numbers
import os
from ctypes import POINTER, c_float, c_int32
from typing import Any, Callable, Dict, Optional, Sequence, Tuple

INT32_MIN, INT32_MAX = -(2**31), 2**31 - 1
UINT32_MAX = 2**32 - 1
UINT64_MAX = 2**64 - 1


def check_int(name: str, value: Any, lo: int, hi: int) -> int:
    """`value` as an int in [lo, hi]; TypeError for non-integers (bool included), ValueError out
    of range."""
    if isinstance(value, bool) or not hasattr(value, "__index__"):
        raise TypeError(f"{name} must be an int, not {type(value).__name__}")
    v = int(value.__index__())
    if not lo <= v <= hi:
        raise ValueError(f"{name} = {v} is outside [{lo}, {hi}]")
    return v


def check_float(name: str, value: Any) -> float:
    """`value` as a float; TypeError for non-numbers (bool, str, None)."""
    if isinstance(value, (bool, str, bytes)) or not isinstance(value, numbers.Real):
        raise TypeError(f"{name} must be a number, not {type(value).__name__}")
    return float(value)


def check_bool(name: str, value: Any) -> bool:
    """`value` as a bool; accepts bool, 0/1 ints and numpy bools."""
    if isinstance(value, bool) or type(value).__name__ == "bool_":
        return bool(value)
    if isinstance(value, numbers.Integral) and int(value) in (0, 1):
        return bool(value)
    raise TypeError(f"{name} must be a bool, not {type(value).__name__}")


def encode_path(path: Any) -> bytes:
    """A filesystem path as NUL-free bytes for C."""
    if not isinstance(path, (str, bytes, os.PathLike)):
        raise TypeError(f"path must be str, bytes or os.PathLike, not {type(path).__name__}")
    raw = os.fsencode(path)
    if b"\0" in raw:
        raise ValueError("path contains a NUL byte")
    return raw


def encode_text(name: str, text: Any, allow_nul: bool = True) -> bytes:
    """`text` (str) as UTF-8; TypeError for non-str, ValueError (UnicodeEncodeError) for lone
    surrogates, ValueError for NUL when the C side needs a C string."""
    if not isinstance(text, str):
        raise TypeError(f"{name} must be str, not {type(text).__name__}")
    raw = text.encode("utf-8")
    if not allow_nul and b"\0" in raw:
        raise ValueError(f"{name} contains a NUL character")
    return raw


def int32_array(name: str, ids: Any) -> Tuple[Any, int]:
    """Token ids as a C int32 array: (ctypes array or None, count). Accepts a sequence of ints or
    an integer numpy array; TypeError for anything else, ValueError for ids outside int32."""
    import array

    if isinstance(ids, (str, bytes, bytearray)) or ids is None:
        raise TypeError(f"{name} must be a sequence of ints, not {type(ids).__name__}")
    if hasattr(ids, "dtype") and hasattr(ids, "ndim"):  # numpy array
        if ids.dtype.kind not in "iu":
            raise TypeError(f"{name} must hold integers, not {ids.dtype}")
        if ids.ndim != 1:
            raise ValueError(f"{name} must be 1-D, got shape {ids.shape}")
        if ids.size and (int(ids.min()) < INT32_MIN or int(ids.max()) > INT32_MAX):
            raise ValueError(f"{name} holds ids outside int32")
        ids = ids.tolist()
    try:
        seq = list(ids)
    except TypeError:
        raise TypeError(f"{name} must be a sequence of ints, not {type(ids).__name__}") from None
    for i, v in enumerate(seq):
        if isinstance(v, bool) or not hasattr(v, "__index__"):
            raise TypeError(f"{name}[{i}] must be an int, not {type(v).__name__}")
    try:
        arr = array.array("i", [v.__index__() for v in seq])
    except OverflowError:
        raise ValueError(f"{name} holds ids outside int32") from None
    if arr.itemsize != 4:  # pragma: no cover - C int is 32-bit on every supported platform
        arr = array.array("l", seq)
    n = len(arr)
    if n == 0:
        return None, 0
    return (c_int32 * n).from_buffer(arr), n


def as_int32_ptr(buf: Any) -> Any:
    """A POINTER(c_int32) to a ctypes array, or NULL for None."""
    if buf is None:
        return None
    return ctypes.cast(buf, POINTER(c_int32))


def callable_or_none(name: str, fn: Optional[Callable[..., Any]]) -> Optional[Callable[..., Any]]:
    if fn is not None and not callable(fn):
        raise TypeError(f"{name} must be callable or None, not {type(fn).__name__}")
    return fn


def float_rows(name: str, data: Any, width: int) -> Tuple[Any, int, int, Any]:
    """Rows of floats as a C float array: (ctypes array, n_rows, row_width, keep-alive).

    Accepts a numpy array (1-D = one row, 2-D = rows) or, without numpy, a sequence of floats
    (one row) or a sequence of sequences."""
    if isinstance(data, (str, bytes, bytearray)) or data is None:
        raise TypeError(f"{name} must be an array of floats, not {type(data).__name__}")
    try:
        import numpy as np  # noqa: F401
    except ImportError:  # pragma: no cover - exercised only without numpy
        np = None  # type: ignore[assignment]
    if np is not None:
        try:
            arr = np.asarray(data)
        except (TypeError, ValueError) as e:
            raise TypeError(f"{name}: {e}") from None
        if arr.dtype.kind not in "fiu" or arr.dtype == np.bool_:
            raise TypeError(f"{name} must hold numbers, not {arr.dtype}")
        if arr.ndim == 1:
            arr = arr.reshape(1, -1)
        if arr.ndim != 2:
            raise ValueError(f"{name} must be 1-D (one row) or 2-D (rows), got shape {arr.shape}")
        arr = np.ascontiguousarray(arr, dtype=np.float32)
        n, w = arr.shape
        if n == 0 or w == 0:
            return None, n, w, arr
        return arr.ctypes.data_as(POINTER(c_float)), n, w, arr
    import array

    rows: Sequence[Any] = list(data)
    if rows and all(isinstance(v, (int, float)) and not isinstance(v, bool) for v in rows):
        rows = [rows]
    flat = array.array("f")
    w = -1
    for r in rows:
        if isinstance(r, (str, bytes)):
            raise TypeError(f"{name} rows must be sequences of floats")
        r = list(r)
        if w == -1:
            w = len(r)
        elif len(r) != w:
            raise ValueError(f"{name} rows have different lengths")
        for v in r:
            if isinstance(v, bool) or not isinstance(v, (int, float)):
                raise TypeError(f"{name} must hold numbers, not {type(v).__name__}")
        flat.extend(float(v) for v in r)
    n = len(rows)
    if n == 0 or w <= 0:
        return None, n, max(w, 0), flat
    return (c_float * len(flat)).from_buffer(flat), n, w, flat


def choice(name: str, value: Any, choices: Dict[str, int]) -> int:
    """The C value of the name `value` (case-insensitive) in `choices`: TypeError for a non-str,
    ValueError for a name not in the table."""
    if not isinstance(value, str):
        raise TypeError(f"{name} must be a str ({' | '.join(choices)}), not {type(value).__name__}")
    try:
        return choices[value.lower()]
    except KeyError:
        raise ValueError(f"{name} {value!r} is not one of {' | '.join(choices)}") from None
