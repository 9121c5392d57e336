"""``Session``: one sequence's KV cache on a model (``colibri_session``): its options, state,
forward passes, routing control and the routing trace; generation comes from
:class:`colibri.generation.Generating`. A session serves one call at a time; use one session per
thread (ctypes releases the GIL during C calls, so sessions run in parallel).

Imports go one way: :mod:`colibri.model` imports this module (``Model.session``,
``Model.infer_batch``), never the reverse."""

from __future__ import annotations

import threading
import warnings
import weakref
from ctypes import byref, c_int32, c_size_t, c_void_p
from typing import TYPE_CHECKING, Any, Callable, List, Optional, Sequence

from . import _buffers
from ._abi import KV_TYPES, QUANT_ACTS, ROUTE_ABORT, ROUTING_MODES, RouteCallback
from ._args import (
    INT32_MAX,
    UINT32_MAX,
    UINT64_MAX,
    as_int32_ptr,
    callable_or_none,
    check_bool,
    check_int,
    choice,
    encode_path,
    float_rows,
    int32_array,
)
from ._buffers import Logits
from ._constants import COLIBRI_SEED_RANDOM
from ._handle import OwnedHandle
from ._lib import ColibriError, Status
from .generation import GenerationResult, Generating, PieceCallback, Prompt

if TYPE_CHECKING:  # annotations only: at run time model.py imports this module, not the reverse
    from .model import Model

__all__ = ["GenerationResult", "Logits", "PieceCallback", "Prompt", "RouteFn", "Session"]

#: Routing-trace callback: (layer, position, expert ids, weights) -> truthy to skip the rest.
RouteFn = Callable[[int, int, List[int], List[float]], Optional[bool]]


def _is_model(obj: Any) -> bool:
    """Whether `obj` is a colibri.Model, recognised by its handle kind rather than its class so
    that this module need not import model.py (which imports this one)."""
    return isinstance(obj, OwnedHandle) and getattr(obj, "_kind", None) == "Model"


def routing_seed_arg(routing_seed: Optional[int], seed: Optional[int]) -> int:
    """The routing seed from ``routing_seed`` or the deprecated ``seed`` keyword (ABI 0's name,
    which read like the sampler's seed of generation); neither given = COLIBRI_SEED_RANDOM (a
    fresh seed per session)."""
    if seed is None:
        return COLIBRI_SEED_RANDOM if routing_seed is None else routing_seed
    if routing_seed is not None:
        raise TypeError("give routing_seed only (seed is its deprecated name)")
    warnings.warn("seed= of a session's routing is now routing_seed=", DeprecationWarning, stacklevel=3)
    return seed


class Session(Generating):
    """A KV cache on a :class:`Model`; make it with ``model.session(...)``.

    * ``infer(tokens)`` runs the forward pass over new tokens and returns logits.
    * ``generate(prompt, ...)`` streams text pieces; ``generate_ids`` returns the ids;
      ``complete`` returns a :class:`GenerationResult` (text, ids, finish reason).
    * ``reset()``, ``truncate(n)``, ``position``, ``n_ctx``; ``set_routing``; ``on_route``.

    The session keeps its Model (and so the library) alive. ``close()`` frees the KV cache;
    using a closed session raises ColibriError. A session serves one call at a time: a second
    concurrent call (another thread, or a call while a ``generate()`` iterator is running)
    raises ColibriError instead of corrupting the cache.
    """

    _kind = "Session"

    def __init__(
        self,
        model: "Model",
        n_ctx: int = 0,
        kv_type: str = "f32",
        all_logits: bool = False,
        routing: str = "topk",
        moe_top_k: int = 0,
        routing_seed: Optional[int] = None,
        quant_act: str = "default",
        *,
        seed: Optional[int] = None,
    ) -> None:
        """See :meth:`Model.session`."""
        if not _is_model(model):
            raise TypeError(f"model must be a colibri.Model, not {type(model).__name__}")
        lib = model.lib
        p = lib.session_params()
        p.n_ctx = check_int("n_ctx", n_ctx, 0, UINT32_MAX)
        p.kv_type = choice("kv_type", kv_type, KV_TYPES)
        p.all_logits = int(check_bool("all_logits", all_logits))
        p.routing_mode = choice("routing", routing, ROUTING_MODES)
        p.moe_top_k = check_int("moe_top_k", moe_top_k, 0, INT32_MAX)
        p.routing_seed = check_int("routing_seed", routing_seed_arg(routing_seed, seed), 0, UINT64_MAX)
        p.quant_act = choice("quant_act", quant_act, QUANT_ACTS)
        h = c_void_p()
        with model._shared() as mh:
            st = lib.colibri_session_new(mh, byref(p), byref(h))
            if st != Status.OK:
                raise lib.error(st)
        super().__init__(lib, h.value, lib.colibri_session_free)  # type: ignore[arg-type]
        info = model._info
        self._model = model  # keeps the Model object (and its Library) alive
        self._vocab = info.vocab_size
        self._hidden = info.hidden_size
        self._all_logits = bool(p.all_logits)
        self._quant_act = quant_act.lower()
        self._scratch: Any = None  # reused logits buffer of infer(copy=False)
        self._route_fn: Optional[RouteFn] = None
        self._route_cfn: Any = None  # the CFUNCTYPE object, alive while registered
        self._route_error: Optional[BaseException] = None
        self._stops: List[threading.Event] = []  # running generate() iterators
        #: The result of the last finished generation (any of the generate methods).
        self.last_result: Optional[GenerationResult] = None

    # -- facts -------------------------------------------------------------------------------

    @property
    def model(self) -> "Model":
        return self._model

    @property
    def all_logits(self) -> bool:
        return self._all_logits

    @property
    def quant_act(self) -> str:
        """The activation mode asked for at creation: "default", "reduced" or "float"."""
        return self._quant_act

    def _position(self) -> "tuple[int, int]":
        pos, n_ctx = c_size_t(), c_size_t()
        with self._exclusive() as h:
            self._lib.check(self._lib.colibri_session_position(h, byref(pos), byref(n_ctx)))
        return pos.value, n_ctx.value

    @property
    def position(self) -> int:
        """Tokens in the KV cache."""
        return self._position()[0]

    @property
    def n_ctx(self) -> int:
        """The context capacity in tokens."""
        return self._position()[1]

    # -- state -------------------------------------------------------------------------------

    def reset(self) -> None:
        """Forget every cached token."""
        with self._exclusive() as h:
            self._lib.check(self._lib.colibri_session_reset(h))

    def truncate(self, n_tokens: int) -> None:
        """Keep only the first `n_tokens` cached tokens (ColibriError INVALID_ARGUMENT if fewer
        are cached)."""
        n = check_int("n_tokens", n_tokens, 0, 2**63 - 1)
        with self._exclusive() as h:
            self._lib.check(self._lib.colibri_session_truncate(h, n))

    def copy_from(self, src: "Session") -> None:
        """Make this session hold exactly what `src` (a session of the same model) holds: its
        cached tokens (KV cache, only the used positions; recurrent state with the state of its
        last call's start), routing RNG state and last logits. `src` is unchanged and the two are
        independent afterwards; this session keeps its own settings (context length, KV type,
        routing mode, top-k, route callback). ColibriError INVALID_ARGUMENT for sessions of
        different models, CONTEXT_FULL when `src` holds more tokens than this session's context;
        an error changes nothing. Copying a session to itself does nothing."""
        if not isinstance(src, Session):
            raise TypeError(f"src must be a Session, not {type(src).__name__}")
        with self._exclusive() as h:
            if src is self:
                return
            with src._exclusive() as s:
                self._lib.check(self._lib.colibri_session_copy(h, s))

    def save_state(self, path: Any, tokens: Optional[Sequence[int]] = None) -> None:
        """Write this session's state (KV cache, recurrent state, routing RNG, last logits) to
        the file `path`, with `tokens` — the ids of all cached tokens, or None — stored beside
        it. Written to a temporary file and renamed into place: on failure an earlier file at
        `path` is as it was. The file belongs to this model file."""
        raw = encode_path(path)
        arr, n = int32_array("tokens", tokens if tokens is not None else [])
        with self._exclusive() as h:
            self._lib.check(self._lib.colibri_session_save_state(h, raw, as_int32_ptr(arr) if n else None, n))

    def load_state(self, path: Any) -> List[int]:
        """Replace this session's state by the one saved in `path` (by :meth:`save_state`, for
        the same model file) and return the token ids stored with it. The whole file is checked
        first: a damaged or foreign file raises ColibriError (INVALID_ARGUMENT; CONTEXT_FULL if
        it holds more tokens than this session's context) and changes nothing."""
        raw = encode_path(path)
        n = c_size_t()
        cap = 256
        with self._exclusive() as h:
            for _ in range(3):
                buf = (c_int32 * cap)()
                st = self._lib.colibri_session_load_state(h, raw, buf, cap, byref(n))
                if st == Status.BUFFER_TOO_SMALL and n.value > cap:
                    cap = n.value
                    continue
                self._lib.check(st)
                return list(buf[: n.value])
        raise AssertionError("the library kept asking for a larger buffer")  # pragma: no cover

    def set_routing(
        self, mode: str = "topk", routing_seed: Optional[int] = None, moe_top_k: int = 0, *,
        seed: Optional[int] = None
    ) -> None:
        """Routing of later calls: ``mode`` "topk" | "gumbel", the Gumbel RNG's
        ``routing_seed`` (None = a fresh random one; any value repeats exactly), experts per token (0 = the model's top_k, else 1..n_experts). ``seed``
        is the deprecated name of ``routing_seed``."""
        m = choice("mode", mode, ROUTING_MODES)
        s = check_int("routing_seed", routing_seed_arg(routing_seed, seed), 0, UINT64_MAX)
        k = check_int("moe_top_k", moe_top_k, 0, INT32_MAX)
        with self._exclusive() as h:
            self._lib.check(self._lib.colibri_session_set_routing(h, m, s, k))

    def on_route(self, fn: Optional[RouteFn]) -> None:
        """Register (or with None, remove) the routing-trace callback. After each ``infer`` /
        ``infer_embeddings`` call it is called for every (position, MoE layer) as
        ``fn(layer, position, experts, weights)`` with the chosen expert ids and their weights
        (Python lists); return True to skip the remaining records of that call. An exception
        raised by `fn` fails the call and is re-raised by it, and the library undoes the call:
        the session is as it was before it (cached tokens, routing RNG; no logits returned), so
        retrying it gives what one clean call gives. The generate methods report their routes
        once generation has ended, and the same holds for them (the pieces already streamed
        stand)."""
        callable_or_none("fn", fn)
        lib = self._lib
        if fn is None:
            cfn: Any = RouteCallback()  # NULL: remove
        else:
            wself = weakref.ref(self)  # no reference cycle through the callback

            def trampoline(_ud: Any, layer: int, position: int, experts: Any, weights: Any, k: int) -> int:
                try:
                    stop = fn(layer, position, experts[:k], weights[:k])
                    return 1 if stop else 0
                except BaseException as e:  # never let an exception unwind into C
                    me = wself()
                    if me is not None and me._route_error is None:
                        me._route_error = e
                    return ROUTE_ABORT  # the library undoes the call

            cfn = RouteCallback(trampoline)
        with self._exclusive() as h:
            lib.check(lib.colibri_session_set_route_callback(h, cfn, None))
            self._route_fn = fn
            self._route_cfn = cfn

    # -- forward passes ----------------------------------------------------------------------

    def _logits_buffer(self, need: int, rows: int, copy: bool, out: Any) -> "tuple[Any, Any]":
        """(float* for C, object to return) for `need` floats (see :meth:`infer`)."""
        shape = (rows, self._vocab) if self._all_logits else (self._vocab,)
        ptr, result, self._scratch = _buffers.logits_buffer(need, shape, copy, out, self._scratch)
        return ptr, result

    def _check_call(self, status: int) -> None:
        """Raise for the status of a call this session's route callback saw: the callback's own
        exception when it aborted the call (which the library undid), else ColibriError."""
        route_error, self._route_error = self._route_error, None
        if status == Status.ABORTED and route_error is not None:
            raise route_error
        self._lib.check(status)

    def infer(self, tokens: Sequence[int], *, copy: bool = True, out: Any = None) -> Logits:
        """Run the forward pass over new `tokens` (appended to the KV cache; nothing is added to
        them) and return logits: shape ``(vocab,)`` for the last position, or ``(n, vocab)``
        with ``all_logits=True``.

        * default: a new numpy float32 array (``array.array("f")``, flat, without numpy).
        * ``copy=False``: a view of a buffer the session reuses: valid (it is ordinary Python
          memory, even after close()) but overwritten by this session's next infer call. Copy
          it if you keep it.
        * ``out=array``: write into your own C-contiguous float32 array (at least the needed
          size) and return a view of it: no allocation at all.

        A failed call (bad id → ColibriError INVALID_ARGUMENT, too many tokens → CONTEXT_FULL,
        an exception in the ``on_route`` callback → that exception) leaves the session as it was
        (and ``out`` / the reused buffer unwritten)."""
        arr, n = int32_array("tokens", tokens)
        if n == 0:
            raise ValueError("tokens is empty: at least one token is needed")
        copy = check_bool("copy", copy)
        need = n * self._vocab if self._all_logits else self._vocab
        ptr, result = self._logits_buffer(need, n, copy, out)
        lib = self._lib
        with self._exclusive() as h:
            self._check_call(lib.colibri_infer(h, as_int32_ptr(arr), n, ptr, need))
        return result

    def infer_embeddings(self, embeddings: Any, *, copy: bool = True, out: Any = None) -> Logits:
        """Like :meth:`infer` with hidden states instead of token ids: a ``(n, hidden_size)``
        array (or one row of ``hidden_size``) of floats, converted to float32."""
        ptr_in, n, width, keep = float_rows("embeddings", embeddings, self._hidden)
        if n == 0:
            raise ValueError("embeddings is empty: at least one row is needed")
        if width != self._hidden:
            raise ValueError(f"embeddings rows have {width} values; the model's hidden_size is {self._hidden}")
        copy = check_bool("copy", copy)
        need = n * self._vocab if self._all_logits else self._vocab
        ptr, result = self._logits_buffer(need, n, copy, out)
        lib = self._lib
        with self._exclusive() as h:
            st = lib.colibri_infer_embeddings(h, ptr_in, n, width, ptr, need)
            del keep
            self._check_call(st)
        return result


    # -- lifetime ----------------------------------------------------------------------------

    def close(self) -> None:
        """Free the KV cache (idempotent). A running ``generate()`` iterator is stopped first."""
        super().close()
        self._route_cfn = None
        self._route_fn = None

    def __repr__(self) -> str:
        if self.closed:
            return "<colibri.Session (closed)>"
        try:
            pos, n_ctx = self._position()
            return f"<colibri.Session {pos}/{n_ctx} tokens>"
        except ColibriError:
            return "<colibri.Session (busy)>"
