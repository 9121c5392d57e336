"""``MoeLayer``: the standalone MoE layer of the C ABI (``colibri_moe_*``): top-k experts chosen
from caller-given gate logits, weighted by the softmax over the chosen gates, summed."""

from __future__ import annotations

from ctypes import byref, c_float, c_int32, c_void_p
from typing import Any, Optional, Sequence

from ._abi import MOE_STORAGES
from ._args import INT32_MAX, check_int, choice, float_rows
from ._handle import OwnedHandle
from ._lib import Library, Status, get_library

__all__ = ["MoeLayer"]


class MoeLayer(OwnedHandle):
    """``MoeLayer(experts, top_k, storage="f32")``: `experts` is a sequence of ``(rows_e, hidden)``
    float matrices (copied into the layer, stored as `storage`: "f32", "bf16" or "q8" —
    ``colibri.MOE_STORAGES``; the error bound of each is in include/colibri.h, q8 needs `hidden`
    a multiple of 32). ``infer(x, gates)`` returns ``max(rows_e)`` floats: the sum over the
    `top_k` largest `gates` of softmax-over-chosen(gate) · (W_e · x); a shorter expert contributes
    zeros past its rows. ``n_threads``: threads of a call, the calling one included (0: one
    per physical core; layers with the same count share the workers). Safe to call from
    several threads at once."""

    _kind = "MoeLayer"

    def __init__(
        self,
        experts: Sequence[Any],
        top_k: int,
        *,
        storage: str = "f32",
        n_threads: int = 0,
        lib: Optional[Library] = None,
    ) -> None:
        if isinstance(experts, (str, bytes)) or not hasattr(experts, "__len__"):
            raise TypeError("experts must be a sequence of 2-D float matrices")
        n = len(experts)
        if n == 0:
            raise ValueError("experts is empty")
        k = check_int("top_k", top_k, 1, INT32_MAX)
        kind = choice("storage", storage, MOE_STORAGES)
        threads = check_int("n_threads", n_threads, 0, 1024)
        rows = []
        hidden = -1
        blobs = []
        for e, w in enumerate(experts):
            _ptr, r, width, keep = float_rows(f"experts[{e}]", w, -1)
            if hidden == -1:
                hidden = width
            elif width != hidden:
                raise ValueError(f"experts[{e}] has {width} columns; experts[0] has {hidden}")
            rows.append(r)
            blobs.append(keep)
        flat = (c_float * (sum(rows) * hidden))()
        at = 0
        for keep in blobs:
            values = keep.reshape(-1).tolist() if hasattr(keep, "reshape") else list(keep)
            flat[at : at + len(values)] = values
            at += len(values)
        sizes = (c_int32 * n)(*rows)
        lib = lib if lib is not None else get_library()
        h = c_void_p()
        p = lib.moe_params()
        p.storage = kind
        p.n_threads = threads
        st = lib.colibri_moe_init_params(byref(h), flat, sizes, n, hidden, k, byref(p))
        if st != Status.OK:
            raise lib.error(st)
        super().__init__(lib, h.value, lib.colibri_moe_free)  # type: ignore[arg-type]
        self.n_experts = n
        self.hidden_size = hidden
        self.top_k = k
        self.storage = storage.lower()
        self.output_size = max(rows)

    def infer(self, x: Any, gates: Any) -> Any:
        """The layer's output for one input vector `x` (hidden_size floats) and `gates`
        (n_experts logits): a numpy float32 array (array.array("f") without numpy)."""
        px, nx, wx, keep_x = float_rows("x", x, self.hidden_size)
        pg, ng, wg, keep_g = float_rows("gates", gates, self.n_experts)
        if nx != 1 or wx != self.hidden_size:
            raise ValueError(f"x must be one vector of {self.hidden_size} floats")
        if ng != 1 or wg != self.n_experts:
            raise ValueError(f"gates must be one vector of {self.n_experts} floats")
        out = (c_float * self.output_size)()
        with self._shared() as h:
            self._lib.check(self._lib.colibri_moe_infer(h, px, out, pg))
        del keep_x, keep_g
        try:
            import numpy as np

            return np.ctypeslib.as_array(out).copy()
        except ImportError:  # pragma: no cover
            import array

            return array.array("f", out)
