"""Generation on a session (``colibri_generate``): keyword options to
``colibri_generate_params`` (stop strings included), the per-token callback trampoline, the
finish reason from ``colibri_generate_result``, and the streaming iterator. :class:`Generating`
is the generation half of :class:`colibri.Session`, which adds the state and forward passes."""

from __future__ import annotations

import ctypes
import queue
import threading
from ctypes import byref, c_char_p
from dataclasses import dataclass, field
from typing import Any, Callable, Dict, Iterator, List, Optional, Sequence, Union

from ._abi import FINISH_REASONS, GenerateParams, TokenCallback
from ._args import (
    INT32_MAX,
    UINT64_MAX,
    as_int32_ptr,
    callable_or_none,
    check_bool,
    check_float,
    check_int,
    encode_text,
    int32_array,
)
from ._handle import OwnedHandle
from ._lib import Status

__all__ = ["FINISH_REASONS", "GenerationResult", "Generating", "PieceCallback", "Prompt", "Stop"]

#: A prompt: text (tokenised with the model's tokenizer, special tokens added) or token ids.
Prompt = Union[str, Sequence[int], Any]

#: Stop strings: one string or a sequence of them (None: none).
Stop = Union[None, str, Sequence[str]]

#: Per-piece callback of :meth:`Generating.complete`: ``(token id or -1 for the final flush,
#: text) -> stop?``. A truthy return (True, non-zero) stops generation, as a non-zero return of
#: the C callback does (finish reason "callback"); None, False or 0 continue.
PieceCallback = Callable[[int, str], Optional[bool]]


@dataclass
class GenerationResult:
    """What one generation produced (``colibri_generate_result`` plus the text and ids)."""

    text: str  #: the generated text (no prompt echo, never any part of a stop string)
    #: the generated ids: an end-of-sequence id that stopped it is not included; the id that
    #: completed a stop string is (its text up to the stop string is in ``text``)
    tokens: List[int]
    prompt_tokens: int  #: ids fed before generating
    #: why it ended, a ``COLIBRI_FINISH_*`` name: "length" (max_tokens reached), "stop" (a stop
    #: string appeared), "eos" (an end-of-sequence token was sampled), "context_full" (the
    #: session's context is full) or "callback" (a callback asked to stop, or the iterator was
    #: closed)
    finish_reason: str
    pieces: List[str] = field(default_factory=list, repr=False)  #: text pieces as streamed
    #: tokens in the KV cache when it ended (after "eos" every returned id is in it; after any
    #: other reason the last generated id is not in it yet: feed it to continue)
    n_cached: int = 0

    @property
    def completion_tokens(self) -> int:
        return len(self.tokens)


def stop_strings(stop: Stop) -> List[bytes]:
    """`stop` as NUL-free UTF-8 strings: None is none, a str is one; TypeError for anything but
    str items (bytes included), ValueError for a NUL."""
    if stop is None:
        return []
    if isinstance(stop, str):
        stop = [stop]
    elif isinstance(stop, (bytes, bytearray)) or not hasattr(stop, "__iter__"):
        raise TypeError(f"stop must be a str or a sequence of str, not {type(stop).__name__}")
    return [encode_text(f"stop[{i}]", s, allow_nul=False) for i, s in enumerate(stop)]


class Generating(OwnedHandle):
    """The generation methods of a session: ``complete`` (a :class:`GenerationResult`),
    ``generate_ids`` (the ids) and ``generate`` (an iterator of text pieces). They hold the
    session exclusively for the whole generation."""

    _model: Any  # the Model, for tokenising text prompts
    _stops: List[threading.Event]  # running generate() iterators
    _route_error: Optional[BaseException]  # raised by the session's route callback, if any
    last_result: Optional[GenerationResult]

    # -- arguments ---------------------------------------------------------------------------

    def _prompt_ids(self, prompt: Prompt, add_special: bool) -> "tuple[Any, int]":
        if isinstance(prompt, str):
            ids = self._model.tokenize(prompt, add_special=add_special)
            arr, n = int32_array("prompt", ids)
        else:
            arr, n = int32_array("prompt", prompt)
        if n == 0:
            raise ValueError("the prompt has no tokens: at least one is needed")
        return arr, n

    def _generate_params(
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
        stop: Stop,
    ) -> GenerateParams:
        """The C parameters: the library's defaults with the given options set. The stop
        strings' C array is kept alive by the struct (ctypes keeps what a field points to)."""
        p = self._lib.generate_params()
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
        stops = stop_strings(stop)
        if stops:
            p.stop = (c_char_p * len(stops))(*stops)
            p.n_stop = len(stops)
        return p

    # -- the C call --------------------------------------------------------------------------

    def _generate_held(
        self, h: int, arr: Any, n: int, gp: GenerateParams, on_piece: Optional[PieceCallback]
    ) -> GenerationResult:
        """colibri_generate with the session already held exclusively."""
        lib = self._lib
        tokens: List[int] = []
        pieces: List[str] = []
        state: Dict[str, Any] = {"error": None}

        def trampoline(_ud: Any, token: int, text: Optional[int], text_len: int) -> int:
            if state["error"] is not None:  # after an exception, never call back into Python code
                return 1
            try:
                piece = ctypes.string_at(text, text_len).decode("utf-8") if text and text_len else ""
                if token >= 0:
                    tokens.append(token)
                if piece:
                    pieces.append(piece)
                return 1 if on_piece is not None and on_piece(token, piece) else 0
            except BaseException as e:  # never let an exception unwind into C
                state["error"] = e
                return 1

        cfn = TokenCallback(trampoline)  # alive until colibri_generate returns
        res = lib.generate_result()
        st = lib.colibri_generate(h, as_int32_ptr(arr), n, byref(gp), cfn, None, None, 0, byref(res))
        err = lib.error(st) if st != Status.OK else None
        # An exception of the session's route callback (reported after generation) aborted the
        # call, which the library undid.
        route_error, self._route_error = self._route_error, None
        if state["error"] is not None:
            raise state["error"]
        if st == Status.ABORTED and route_error is not None:
            raise route_error
        if err is not None:
            raise err
        reason = FINISH_REASONS.get(res.finish_reason, f"unknown({res.finish_reason})")
        result = GenerationResult(
            text="".join(pieces), tokens=tokens, prompt_tokens=n, finish_reason=reason,
            n_cached=res.n_cached, pieces=pieces,
        )
        self.last_result = result
        return result

    # -- public ------------------------------------------------------------------------------

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
        stop: Stop = None,
        add_special: bool = True,
        callback: Optional[PieceCallback] = None,
        grammar: Optional[Any] = None,
    ) -> GenerationResult:
        """Generate and return a :class:`GenerationResult` (text, ids, finish reason).

        `prompt` is text (tokenised with ``add_special``) or token ids, fed after whatever the
        cache holds. Options left at None take the library's defaults (``max_tokens`` 128,
        ``temperature`` 0.8 — 0 is greedy —, ``top_k`` 40, ``top_p`` 0.95, ``min_p`` 0.05,
        ``repetition_penalty`` 1 = off, ``penalty_last_n`` 64, ``seed`` random: a fresh one per call —
        any value, 0 included, repeats exactly).
        ``stop``: a string or a list of strings; generation ends when the text contains one
        (finish reason "stop"), and no part of it is ever returned or streamed (needs the
        model's tokenizer: ColibriError UNSUPPORTED without one).
        ``callback(token, text)`` sees every piece as it is produced (token -1: a final flush of
        held-back text); return a truthy value to stop (finish reason "callback"), None / False
        to go on. An exception raised in it stops generation and is re-raised here.
        ``grammar``: a :class:`colibri.Grammar` of this session's model; the output is held to
        it (not with ``ignore_eos``), and finish reason "eos" means a complete, valid document
        (a ``stop`` string still ends the output: "stop", the document then incomplete)."""
        callable_or_none("callback", callback)
        arr, n = self._prompt_ids(prompt, add_special)
        gp = self._generate_params(max_tokens, temperature, top_k, top_p, min_p, repetition_penalty,
                                   presence_penalty, frequency_penalty, penalty_last_n, seed, ignore_eos, stop)
        if grammar is None:
            with self._exclusive() as h:
                return self._generate_held(h, arr, n, gp, callback)
        with grammar._shared() as gh, self._exclusive() as h:
            gp.grammar = gh
            return self._generate_held(h, arr, n, gp, callback)

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
        stop: Stop = None,
        add_special: bool = True,
    ) -> List[int]:
        """Generate and return the generated token ids (see :meth:`complete` for the options)."""
        return self.complete(
            prompt, max_tokens=max_tokens, temperature=temperature, top_k=top_k, top_p=top_p,
            min_p=min_p, repetition_penalty=repetition_penalty, presence_penalty=presence_penalty,
            frequency_penalty=frequency_penalty, penalty_last_n=penalty_last_n, seed=seed,
            ignore_eos=ignore_eos, stop=stop, add_special=add_special,
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
        stop: Stop = None,
        add_special: bool = True,
    ) -> Iterator[str]:
        """Stream the generated text as pieces (never splitting a UTF-8 character, never holding
        any part of a stop string): an iterator fed while generation runs (on a helper thread;
        the session is busy until it ends). Arguments are checked now; generation starts at the
        first ``next()``. Leaving the loop early (``break``, ``close()``, garbage collection)
        stops generation at the next token (finish reason "callback").
        ``session.last_result`` holds the :class:`GenerationResult` afterwards. See
        :meth:`complete` for the options."""
        arr, n = self._prompt_ids(prompt, add_special)
        gp = self._generate_params(max_tokens, temperature, top_k, top_p, min_p, repetition_penalty,
                                   presence_penalty, frequency_penalty, penalty_last_n, seed, ignore_eos, stop)
        if self.closed:
            raise self._closed_error()
        return self._stream(arr, n, gp)

    def _stream(self, arr: Any, n: int, gp: GenerateParams) -> Iterator[str]:
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
                box["result"] = self._generate_held(h, arr, n, gp, on_piece)
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
        """Stop running ``generate()`` iterators before the handle is freed."""
        for stop in list(getattr(self, "_stops", ())):
            stop.set()
