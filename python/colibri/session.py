"""``Session``: one sequence's KV cache on a model (``colibri_session``): forward passes,
generation, routing control and the routing trace. A session serves one call at a time; use one
session per thread (ctypes releases the GIL during C calls, so sessions run in parallel)."""

from __future__ import annotations

import array
import ctypes
import queue
import threading
import weakref
from ctypes import POINTER, byref, c_float, c_int32, c_size_t, c_void_p
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Callable, Dict, Iterator, List, Optional, Sequence, Union

from ._handle import OwnedHandle
from ._lib import (
    INT32_MAX,
    UINT32_MAX,
    UINT64_MAX,
    ColibriError,
    RouteCallback,
    SamplerParams,
    Status,
    TokenCallback,
    as_int32_ptr,
    callable_or_none,
    check_bool,
    check_float,
    check_int,
    float_rows,
    int32_array,
)

try:  # numpy is optional: without it logits come back as array.array("f")
    import numpy as np
except ImportError:  # pragma: no cover - exercised only without numpy
    np = None  # type: ignore[assignment]

if TYPE_CHECKING:
    from .model import Model

__all__ = ["GenerationResult", "Logits", "Session", "infer_batch"]

KV_TYPES = {"f32": 0, "f16": 1, "bf16": 2}
ROUTING_MODES = {"topk": 0, "gumbel": 1}

#: What infer returns: a numpy float32 array, or array.array("f") without numpy.
Logits = Any

#: A prompt: text (tokenised with the model's tokenizer, special tokens added) or token ids.
Prompt = Union[str, Sequence[int], Any]

#: Per-piece callback of :meth:`Session.complete`: (token id or -1 for the final flush, text)
#: -> truthy to stop.
PieceCallback = Callable[[int, str], Optional[bool]]

#: Routing-trace callback: (layer, position, expert ids, weights) -> truthy to skip the rest.
RouteFn = Callable[[int, int, List[int], List[float]], Optional[bool]]


@dataclass
class GenerationResult:
    """What one generation produced."""

    text: str  #: the generated text (no prompt echo)
    tokens: List[int]  #: the generated ids (an end-of-sequence id that stopped it is not included)
    prompt_tokens: int  #: ids fed before generating
    #: "length" (max_tokens reached), "stop" (end-of-sequence token), "context" (context full)
    #: or "cancelled" (a callback asked to stop / the iterator was closed)
    finish_reason: str
    pieces: List[str] = field(default_factory=list, repr=False)  #: text pieces as streamed

    @property
    def completion_tokens(self) -> int:
        return len(self.tokens)


class Session(OwnedHandle):
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
        seed: int = 0,
    ) -> None:
        from .model import Model

        if not isinstance(model, Model):
            raise TypeError(f"model must be a colibri.Model, not {type(model).__name__}")
        lib = model.lib
        p = lib.session_params()
        p.n_ctx = check_int("n_ctx", n_ctx, 0, UINT32_MAX)
        p.kv_type = _choice("kv_type", kv_type, KV_TYPES)
        p.all_logits = int(check_bool("all_logits", all_logits))
        p.routing_mode = _choice("routing", routing, ROUTING_MODES)
        p.moe_top_k = check_int("moe_top_k", moe_top_k, 0, INT32_MAX)
        p.seed = check_int("seed", seed, 0, UINT64_MAX)
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

    def set_routing(self, mode: str = "topk", seed: int = 0, moe_top_k: int = 0) -> None:
        """Routing of later calls: ``mode`` "topk" | "gumbel", the Gumbel RNG ``seed``, experts
        per token (0 = the model's top_k, else 1..n_experts)."""
        m = _choice("mode", mode, ROUTING_MODES)
        s = check_int("seed", seed, 0, UINT64_MAX)
        k = check_int("moe_top_k", moe_top_k, 0, INT32_MAX)
        with self._exclusive() as h:
            self._lib.check(self._lib.colibri_session_set_routing(h, m, s, k))

    def on_route(self, fn: Optional[RouteFn]) -> None:
        """Register (or with None, remove) the routing-trace callback. After each ``infer`` /
        ``infer_embeddings`` call it is called for every (position, MoE layer) as
        ``fn(layer, position, experts, weights)`` with the chosen expert ids and their weights
        (Python lists); return True to skip the remaining records of that call. An exception
        raised by `fn` stops the records and is re-raised by the infer call.

        (libcolibri 0.1 reports routes for infer calls only, not during generation.)"""
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
                    return 1

            cfn = RouteCallback(trampoline)
        with self._exclusive() as h:
            lib.check(lib.colibri_session_set_route_callback(h, cfn, None))
            self._route_fn = fn
            self._route_cfn = cfn

    # -- forward passes ----------------------------------------------------------------------

    def _logits_buffer(self, need: int, rows: int, copy: bool, out: Any) -> "tuple[Any, Any, Any]":
        """(pointer, object to return, shape) for `need` floats."""
        shape = (rows, self._vocab) if self._all_logits else (self._vocab,)
        if out is not None:
            if np is None or not isinstance(out, np.ndarray):
                raise TypeError("out must be a numpy.ndarray")
            if out.dtype != np.float32 or not out.flags.c_contiguous or not out.flags.writeable:
                raise ValueError("out must be a writable C-contiguous float32 array")
            if out.size < need:
                raise ValueError(f"out holds {out.size} floats; this call needs {need}")
            view = out.reshape(-1)[:need].reshape(shape)
            return out.ctypes.data_as(POINTER(c_float)), view, shape
        if np is not None:
            if copy:
                buf = np.empty(need, dtype=np.float32)
            else:
                if self._scratch is None or self._scratch.size < need:
                    self._scratch = np.empty(need, dtype=np.float32)
                buf = self._scratch
            return buf.ctypes.data_as(POINTER(c_float)), buf[:need].reshape(shape), shape
        flat = array.array("f", bytes(4 * need))
        return (c_float * need).from_buffer(flat), flat, shape

    def _finish_route_error(self) -> None:
        err, self._route_error = self._route_error, None
        if err is not None:
            raise err

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

        A failed call (bad id → ColibriError INVALID_ARGUMENT, too many tokens → CONTEXT_FULL)
        leaves the cache as it was."""
        arr, n = int32_array("tokens", tokens)
        if n == 0:
            raise ValueError("tokens is empty: at least one token is needed")
        copy = check_bool("copy", copy)
        need = n * self._vocab if self._all_logits else self._vocab
        ptr, result, _ = self._logits_buffer(need, n, copy, out)
        lib = self._lib
        with self._exclusive() as h:
            st = lib.colibri_infer(h, as_int32_ptr(arr), n, ptr, need)
            if st != Status.OK:
                err = lib.error(st)
                self._route_error = None
                raise err
            self._finish_route_error()
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
        ptr, result, _ = self._logits_buffer(need, n, copy, out)
        lib = self._lib
        with self._exclusive() as h:
            st = lib.colibri_infer_embeddings(h, ptr_in, n, width, ptr, need)
            del keep
            if st != Status.OK:
                err = lib.error(st)
                self._route_error = None
                raise err
            self._finish_route_error()
        return result

    # -- generation --------------------------------------------------------------------------

    def _prompt_ids(self, prompt: Prompt, add_special: bool) -> "tuple[Any, int]":
        if isinstance(prompt, str):
            ids = self._model.tokenize(prompt, add_special=add_special)
            arr, n = int32_array("prompt", ids)
        else:
            arr, n = int32_array("prompt", prompt)
        if n == 0:
            raise ValueError("the prompt has no tokens: at least one is needed")
        return arr, n

    def _sampler(
        self,
        max_tokens: Optional[int],
        temperature: Optional[float],
        top_k: Optional[int],
        top_p: Optional[float],
        min_p: Optional[float],
        repetition_penalty: Optional[float],
        presence_penalty: Optional[float],
        frequency_penalty: Optional[float],
        penalty_last_n: Optional[int],
        seed: Optional[int],
        ignore_eos: bool,
    ) -> SamplerParams:
        p = self._lib.sampler_params()
        if max_tokens is not None:
            p.max_tokens = check_int("max_tokens", max_tokens, 0, INT32_MAX)
        if temperature is not None:
            p.temperature = check_float("temperature", temperature)
        if top_k is not None:
            p.top_k = check_int("top_k", top_k, 0, INT32_MAX)
        if top_p is not None:
            p.top_p = check_float("top_p", top_p)
        if min_p is not None:
            p.min_p = check_float("min_p", min_p)
        if repetition_penalty is not None:
            p.repetition_penalty = check_float("repetition_penalty", repetition_penalty)
        if presence_penalty is not None:
            p.presence_penalty = check_float("presence_penalty", presence_penalty)
        if frequency_penalty is not None:
            p.frequency_penalty = check_float("frequency_penalty", frequency_penalty)
        if penalty_last_n is not None:
            p.penalty_last_n = check_int("penalty_last_n", penalty_last_n, 0, INT32_MAX)
        if seed is not None:
            p.seed = check_int("seed", seed, 0, UINT64_MAX)
        p.ignore_eos = int(check_bool("ignore_eos", ignore_eos))
        return p

    def _generate_held(
        self, h: int, arr: Any, n: int, sp: SamplerParams, on_piece: Optional[PieceCallback]
    ) -> GenerationResult:
        """colibri_generate with the session already held exclusively."""
        lib = self._lib
        tokens: List[int] = []
        pieces: List[str] = []
        state: Dict[str, Any] = {"error": None, "cancelled": False}

        def trampoline(_ud: Any, token: int, text: Optional[int], text_len: int) -> int:
            if state["error"] is not None:  # after an exception, never call back into Python code
                return 1
            try:
                piece = ctypes.string_at(text, text_len).decode("utf-8") if text and text_len else ""
                if token >= 0:
                    tokens.append(token)
                if piece:
                    pieces.append(piece)
                if on_piece is not None and on_piece(token, piece) and token >= 0:
                    state["cancelled"] = True  # (a stop request on the final flush changes nothing)
                    return 1
                return 0
            except BaseException as e:  # never let an exception unwind into C
                state["error"] = e
                state["cancelled"] = True
                return 1

        cfn = TokenCallback(trampoline)  # alive until colibri_generate returns
        n_out = c_size_t()
        st = lib.colibri_generate(h, as_int32_ptr(arr), n, byref(sp), cfn, None, None, 0, byref(n_out))
        err = lib.error(st) if st != Status.OK else None
        if state["error"] is not None:
            raise state["error"]
        if err is not None:
            raise err
        pos, n_ctx = c_size_t(), c_size_t()
        lib.check(lib.colibri_session_position(h, byref(pos), byref(n_ctx)))
        if state["cancelled"]:
            reason = "cancelled"
        elif n_out.value > len(tokens):
            reason = "stop"  # the library counts the end-of-sequence id it did not deliver
        elif len(tokens) >= sp.max_tokens:
            reason = "length"
        elif pos.value >= n_ctx.value:
            reason = "context"
        else:
            reason = "stop"
        result = GenerationResult(
            text="".join(pieces), tokens=tokens, prompt_tokens=n, finish_reason=reason, pieces=pieces
        )
        self.last_result = result
        return result

    def complete(
        self,
        prompt: Prompt,
        *,
        max_tokens: Optional[int] = None,
        temperature: Optional[float] = None,
        top_k: Optional[int] = None,
        top_p: Optional[float] = None,
        min_p: Optional[float] = None,
        repetition_penalty: Optional[float] = None,
        presence_penalty: Optional[float] = None,
        frequency_penalty: Optional[float] = None,
        penalty_last_n: Optional[int] = None,
        seed: Optional[int] = None,
        ignore_eos: bool = False,
        add_special: bool = True,
        callback: Optional[PieceCallback] = None,
    ) -> GenerationResult:
        """Generate and return a :class:`GenerationResult` (text, ids, finish reason).

        `prompt` is text (tokenised with ``add_special``) or token ids, fed after whatever the
        cache holds. Options left at None take the library's defaults (``max_tokens`` 128,
        ``temperature`` 0.8 — 0 is greedy —, ``top_k`` 40, ``top_p`` 0.95, ``min_p`` 0.05,
        ``repetition_penalty`` 1 = off, ``penalty_last_n`` 64, ``seed`` 0).
        ``callback(token, text)`` sees every piece as it is produced (token -1: a final flush of
        held-back text); return True to stop. An exception raised in it stops generation and is
        re-raised here."""
        callable_or_none("callback", callback)
        arr, n = self._prompt_ids(prompt, add_special)
        sp = self._sampler(max_tokens, temperature, top_k, top_p, min_p, repetition_penalty,
                           presence_penalty, frequency_penalty, penalty_last_n, seed, ignore_eos)
        with self._exclusive() as h:
            return self._generate_held(h, arr, n, sp, callback)

    def generate_ids(
        self,
        prompt: Prompt,
        *,
        max_tokens: Optional[int] = None,
        temperature: Optional[float] = None,
        top_k: Optional[int] = None,
        top_p: Optional[float] = None,
        min_p: Optional[float] = None,
        repetition_penalty: Optional[float] = None,
        presence_penalty: Optional[float] = None,
        frequency_penalty: Optional[float] = None,
        penalty_last_n: Optional[int] = None,
        seed: Optional[int] = None,
        ignore_eos: bool = False,
        add_special: bool = True,
    ) -> List[int]:
        """Generate and return the generated token ids (see :meth:`complete` for the options)."""
        return self.complete(
            prompt, max_tokens=max_tokens, temperature=temperature, top_k=top_k, top_p=top_p,
            min_p=min_p, repetition_penalty=repetition_penalty, presence_penalty=presence_penalty,
            frequency_penalty=frequency_penalty, penalty_last_n=penalty_last_n, seed=seed,
            ignore_eos=ignore_eos, add_special=add_special,
        ).tokens

    def generate(
        self,
        prompt: Prompt,
        *,
        max_tokens: Optional[int] = None,
        temperature: Optional[float] = None,
        top_k: Optional[int] = None,
        top_p: Optional[float] = None,
        min_p: Optional[float] = None,
        repetition_penalty: Optional[float] = None,
        presence_penalty: Optional[float] = None,
        frequency_penalty: Optional[float] = None,
        penalty_last_n: Optional[int] = None,
        seed: Optional[int] = None,
        ignore_eos: bool = False,
        add_special: bool = True,
    ) -> Iterator[str]:
        """Stream the generated text as pieces (never splitting a UTF-8 character): an iterator
        fed while generation runs (on a helper thread; the session is busy until it ends).
        Arguments are checked now; generation starts at the first ``next()``. Leaving the loop
        early (``break``, ``close()``, garbage collection) stops generation at the next token.
        ``session.last_result`` holds the :class:`GenerationResult` afterwards. See
        :meth:`complete` for the options."""
        arr, n = self._prompt_ids(prompt, add_special)
        sp = self._sampler(max_tokens, temperature, top_k, top_p, min_p, repetition_penalty,
                           presence_penalty, frequency_penalty, penalty_last_n, seed, ignore_eos)
        if self.closed:
            raise self._closed_error()
        return self._stream(arr, n, sp)

    def _stream(self, arr: Any, n: int, sp: SamplerParams) -> Iterator[str]:
        q: "queue.SimpleQueue[Any]" = queue.SimpleQueue()
        stop = threading.Event()
        end = object()
        box: Dict[str, Any] = {}

        def on_piece(_token: int, text: str) -> bool:
            if text:
                q.put(text)
            return stop.is_set()

        h = self._acquire_exclusive()  # released by the worker when the C call returns
        self._set_owner(None)

        def worker() -> None:
            self._set_owner(threading.get_ident())
            try:
                box["result"] = self._generate_held(h, arr, n, sp, on_piece)
            except BaseException as e:
                box["error"] = e
            finally:
                self._release()
                q.put(end)

        self._stops.append(stop)
        t = threading.Thread(target=worker, name="colibri-generate", daemon=True)
        try:
            t.start()
        except BaseException:
            self._release()
            self._stops.remove(stop)
            raise
        try:
            while True:
                item = q.get()
                if item is end:
                    break
                yield item
            t.join()
            if "error" in box:
                raise box["error"]
        finally:
            stop.set()
            t.join()
            try:
                self._stops.remove(stop)
            except ValueError:
                pass

    def _before_close(self) -> None:
        for stop in list(getattr(self, "_stops", ())):
            stop.set()

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


def _choice(name: str, value: Any, choices: Dict[str, int]) -> int:
    if not isinstance(value, str):
        raise TypeError(f"{name} must be a str ({' | '.join(choices)}), not {type(value).__name__}")
    try:
        return choices[value.lower()]
    except KeyError:
        raise ValueError(f"{name} {value!r} is not one of {' | '.join(choices)}") from None


def infer_batch(model: "Model", sessions: Sequence[Session], token_lists: Sequence[Sequence[int]]) -> List[Logits]:
    """One forward step over several sessions of `model` together (``colibri_infer_batch``):
    session i gets ``token_lists[i]`` (one id to decode, or a prompt chunk), exactly as
    ``sessions[i].infer(token_lists[i])`` would, while the model's weights are read once for
    all of them. Returns one logits array per session, shaped as its ``infer`` would return them.

    Every session must have been made from this Model object and be free (not closed, not busy);
    a session given twice raises ColibriError INVALID_ARGUMENT. The library checks the rest
    before anything changes — an empty token list or a session of another model (INVALID_ARGUMENT),
    a full context (CONTEXT_FULL) — so a failed call leaves every session as it was."""
    from .model import Model

    if not isinstance(model, Model):
        raise TypeError(f"model must be a colibri.Model, not {type(model).__name__}")
    sessions = list(sessions)
    lists = list(token_lists)
    for i, s in enumerate(sessions):
        if not isinstance(s, Session):
            raise TypeError(f"sessions[{i}] must be a colibri.Session, not {type(s).__name__}")
    if len(lists) != len(sessions):
        raise ValueError(f"{len(sessions)} sessions but {len(lists)} token lists")
    seen: Dict[int, int] = {}
    for i, s in enumerate(sessions):
        if id(s) in seen:
            raise ColibriError(Status.INVALID_ARGUMENT, f"sessions[{seen[id(s)]}] and sessions[{i}] are the same session")
        seen[id(s)] = i
    arrays = [int32_array(f"token_lists[{i}]", t) for i, t in enumerate(lists)]
    n = len(sessions)
    counts = (c_size_t * max(n, 1))(*[k for _, k in arrays])
    ptrs = (POINTER(c_int32) * max(n, 1))(*[as_int32_ptr(a) if k else None for a, k in arrays])
    rows = [k if s._all_logits else 1 for s, (_, k) in zip(sessions, arrays)]
    vocab = model._info.vocab_size
    need = sum(rows) * vocab
    if np is not None:
        buf = np.empty(max(need, 1), dtype=np.float32)
        out_ptr = buf.ctypes.data_as(POINTER(c_float))
    else:
        flat = array.array("f", bytes(4 * max(need, 1)))
        out_ptr = ctypes.cast((c_float * max(need, 1)).from_buffer(flat), POINTER(c_float))
    lib = model.lib
    held: List[Session] = []
    try:
        handles = (c_void_p * max(n, 1))()
        for i, s in enumerate(sessions):
            handles[i] = s._acquire_exclusive()
            held.append(s)
        with model._shared() as mh:
            st = lib.colibri_infer_batch(mh, handles, ptrs, counts, n, out_ptr, need)
            err = lib.error(st) if st != Status.OK else None
        route_errors = [s._route_error for s in sessions if s._route_error is not None]
        for s in sessions:
            s._route_error = None
        if err is not None:
            raise err
        if route_errors:
            raise route_errors[0]
    finally:
        for s in held:
            s._release()
    out: List[Logits] = []
    at = 0
    for s, r in zip(sessions, rows):
        if np is not None:
            piece = buf[at:at + r * vocab]
            out.append(piece.reshape(r, vocab) if s._all_logits else piece)
        else:
            out.append(flat[at:at + r * vocab])
        at += r * vocab
    return out
