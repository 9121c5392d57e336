"""Float buffers the library writes logits into, with numpy optional: numpy float32 arrays when
numpy is importable, ``array.array("f")`` otherwise. The one place the package decides between
the two (``np`` is None without numpy; tests set it to None to exercise the pure-Python path)."""

from __future__ import annotations

import array
import ctypes
from ctypes import POINTER, c_float
from typing import Any, List, Sequence, Tuple

try:  # numpy is optional: without it logits come back as array.array("f")
    import numpy as np
except ImportError:  # pragma: no cover - exercised only without numpy
    np = None  # type: ignore[assignment]

__all__ = ["Logits", "logits_buffer", "new_floats", "split_rows"]

#: What infer returns: a numpy float32 array, or array.array("f") without numpy.
Logits = Any


def new_floats(n: int) -> Tuple[Any, Any]:
    """(float* for C, the owning buffer) for `n` floats (at least one is allocated)."""
    size = max(n, 1)
    if np is not None:
        buf = np.empty(size, dtype=np.float32)
        return buf.ctypes.data_as(POINTER(c_float)), buf
    flat = array.array("f", bytes(4 * size))
    return ctypes.cast((c_float * size).from_buffer(flat), POINTER(c_float)), flat


def logits_buffer(need: int, shape: Tuple[int, ...], copy: bool, out: Any, scratch: Any) -> Tuple[Any, Any, Any]:
    """Where one infer call writes `need` floats: (float*, what to return, the scratch buffer to
    keep). `out` is the caller's array (a view of it is returned); else with `copy` a new array,
    without it a view of `scratch` (grown when too small). Without numpy: a new flat
    ``array.array("f")`` and `shape` is not applied."""
    if out is not None:
        if np is None or not isinstance(out, np.ndarray):
            raise TypeError("out must be a numpy.ndarray")
        if out.dtype != np.float32 or not out.flags.c_contiguous or not out.flags.writeable:
            raise ValueError("out must be a writable C-contiguous float32 array")
        if out.size < need:
            raise ValueError(f"out holds {out.size} floats; this call needs {need}")
        view = out.reshape(-1)[:need].reshape(shape)
        return out.ctypes.data_as(POINTER(c_float)), view, scratch
    if np is not None:
        if copy:
            buf = np.empty(need, dtype=np.float32)
        else:
            if scratch is None or not isinstance(scratch, np.ndarray) or scratch.size < need:
                scratch = np.empty(need, dtype=np.float32)
            buf = scratch
        return buf.ctypes.data_as(POINTER(c_float)), buf[:need].reshape(shape), scratch
    flat = array.array("f", bytes(4 * need))
    return (c_float * need).from_buffer(flat), flat, scratch


def split_rows(buf: Any, rows: Sequence[int], vocab: int, shaped: Sequence[bool]) -> List[Logits]:
    """Cut a batch's logits buffer into one result per session: `rows[i]` rows of `vocab`,
    shaped ``(rows, vocab)`` where `shaped[i]` (an all_logits session), flat otherwise (and
    always flat without numpy)."""
    out: List[Logits] = []
    at = 0
    for r, s in zip(rows, shaped):
        piece = buf[at:at + r * vocab]
        out.append(piece.reshape(r, vocab) if s and hasattr(piece, "reshape") else piece)
        at += r * vocab
    return out
