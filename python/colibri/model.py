"""``Model``: an opened ``.colibri`` file (``colibri_model``), its facts, tokenizer and chat
template, the sessions made on it, and batched forward steps over several of them
(``colibri_infer_batch``). A model is immutable and may be shared by many threads and sessions.

Imports go one way: this module imports :mod:`colibri.session`, never the reverse."""

from __future__ import annotations

import ctypes
import os
from ctypes import POINTER, byref, c_char, c_int32, c_size_t, c_uint8, c_void_p
from dataclasses import dataclass
from typing import Any, Dict, Iterable, List, Mapping, Optional, Sequence, Tuple, Union

from . import _buffers
from ._abi import FAMILIES, POOLINGS, QUANT_ACTS, ChatMessage
from ._args import as_int32_ptr, check_bool, check_int, choice, encode_path, encode_text, int32_array
from ._buffers import Logits
from ._handle import OwnedHandle
from ._lib import ColibriError, Library, Status, get_library
from .session import Session

__all__ = ["FAMILIES", "Model", "ModelInfo", "infer_batch"]

#: Chat messages: ``{"role": ..., "content": ...}`` mappings or ``(role, content)`` pairs.
Message = Union[Mapping[str, str], Tuple[str, str], Sequence[str]]

PathLike = Union[str, bytes, "os.PathLike[str]", "os.PathLike[bytes]"]


@dataclass(frozen=True)
class ModelInfo:
    """Facts about a model (``colibri_model_info``)."""

    family: str  #: "mixtral", "qwen2_moe", "qwen3_moe", "olmoe", "granitemoe", "glm4_moe", "deepseek_v2", "deepseek_v3", "gpt_oss", "phimoe", "qwen3_next", "dots1", "ernie4_5_moe", "hunyuan_v1_moe" or "llama4" (a ``COLIBRI_FAMILY_*`` name)
    family_id: int  #: the C value
    vocab_size: int
    n_ctx_train: int  #: trained context length (max_position_embeddings)
    hidden_size: int
    n_layers: int
    n_experts: int
    top_k: int  #: experts per token
    n_params: int
    n_active_params: int  #: parameters read per token
    bos_token: Optional[int]  #: None when the model has none
    eos_token: Optional[int]  #: the first end-of-sequence id, None when none
    n_recurrent_layers: int = 0  #: layers with a recurrent state instead of a KV cache (Qwen3-Next's DeltaNet)
    n_attention_layers: int = 0  #: layers with softmax attention and a KV cache
    session_state_bytes: int = 0  #: recurrent-state bytes each session holds whatever its length


class Model(OwnedHandle):
    """An opened model file.

    ``Model(path, mmap=True, mlock=False, *, n_threads=0, pin_threads=False, sigbus_guard=False,
    hugepages=True)`` maps (or with
    ``mmap=False`` reads) and validates the file; a bad path raises ``ColibriError`` with status
    ``IO``, a malformed file ``INVALID_MODEL``. The model runs its forward passes on worker
    threads of its own, shared by all its sessions: ``n_threads`` of them (0: one per physical
    core; at most 1024), pinned to CPUs with ``pin_threads``; results do not depend on the
    count. They start at the first forward pass, and again in a child process forked after it
    (``multiprocessing`` with the "fork" start method, pre-forking servers).
    ``sigbus_guard=True`` survives the file being truncated or rewritten in place while mapped:
    calls then raise ``ColibriError`` with status ``MODEL_CHANGED`` (open the model again) instead
    of the process dying of SIGBUS; it installs a process-wide handler that chains to any earlier.
    ``hugepages=False`` leaves the mapping without the transparent-huge-page advice the library
    gives by default (2 MiB pages for the weights where the kernel allows).
    Close it with ``close()`` or a ``with`` block; sessions made from it stay valid after that
    (the C session holds its own reference), but tokenising text through a session needs the
    model open.

    All methods are safe to call from several threads at once.
    """

    _kind = "Model"
    path: Union[str, bytes]

    def __init__(
        self,
        path: PathLike,
        mmap: bool = True,
        mlock: bool = False,
        *,
        n_threads: int = 0,
        pin_threads: bool = False,
        sigbus_guard: bool = False,
        hugepages: bool = True,
        lib: Optional[Library] = None,
    ) -> None:
        raw = encode_path(path)
        use_mmap = check_bool("mmap", mmap)
        use_mlock = check_bool("mlock", mlock)
        threads = check_int("n_threads", n_threads, 0, 1024)
        pin = check_bool("pin_threads", pin_threads)
        guard = check_bool("sigbus_guard", sigbus_guard)
        huge = check_bool("hugepages", hugepages)
        lib = lib if lib is not None else get_library()
        p = lib.model_params()
        p.use_mmap = int(use_mmap)
        p.use_mlock = int(use_mlock)
        p.n_threads = threads
        p.pin_threads = int(pin)
        p.sigbus_guard = int(guard)
        p.use_hugepages = int(huge)
        h = c_void_p()
        st = lib.colibri_model_open(raw, byref(p), byref(h))
        if st != Status.OK:
            raise lib.error(st)
        super().__init__(lib, h.value, lib.colibri_model_free)  # type: ignore[arg-type]
        self.path = os.fspath(path)
        self._info = self._read_info()

    @property
    def lib(self) -> Library:
        """The Library this model was opened with."""
        return self._lib

    # -- facts -------------------------------------------------------------------------------

    def _read_info(self) -> ModelInfo:
        lib = self._lib
        s = lib.model_info_struct()
        with self._shared() as h:
            lib.check(lib.colibri_model_get_info(h, byref(s)))
        return ModelInfo(
            family=FAMILIES.get(s.family, f"unknown({s.family})"),
            family_id=s.family,
            vocab_size=s.vocab_size,
            n_ctx_train=s.n_ctx_train,
            hidden_size=s.hidden_size,
            n_layers=s.n_layers,
            n_experts=s.n_experts,
            top_k=s.top_k,
            n_params=s.n_params,
            n_active_params=s.n_active_params,
            bos_token=None if s.bos_token < 0 else s.bos_token,
            eos_token=None if s.eos_token < 0 else s.eos_token,
            n_recurrent_layers=s.n_recurrent_layers,
            n_attention_layers=s.n_attention_layers,
            session_state_bytes=s.session_state_bytes,
        )

    @property
    def info(self) -> ModelInfo:
        """The model's facts (read once at open; raises ColibriError once the model is closed)."""
        if self.closed:
            raise self._closed_error()
        return self._info

    @property
    def user_metadata(self) -> bytes:
        """The blob attached at conversion (``colibri convert --user-metadata FILE``), copied;
        ``b""`` when the file has none."""
        lib = self._lib
        data = POINTER(c_uint8)()
        n = c_size_t()
        with self._shared() as h:
            lib.check(lib.colibri_model_user_metadata(h, byref(data), byref(n)))
            if not data or n.value == 0:
                return b""
            return ctypes.string_at(data, n.value)

    # -- text --------------------------------------------------------------------------------

    def tokenize(self, text: str, add_special: bool = True) -> List[int]:
        """Token ids of `text`. ``add_special`` adds BOS etc. as the tokenizer's post-processor
        says (nothing for Qwen-style tokenizers)."""
        raw = encode_text("text", text)
        special = int(check_bool("add_special", add_special))
        return self._ids_call(
            lambda h, buf, cap, out: self._lib.colibri_tokenize(h, raw, len(raw), special, buf, cap, out),
            len(raw) + 8,
        )

    def _ids_call(self, call: Any, cap: int) -> List[int]:
        """Run a (tokens_out, tokens_cap, n_tokens_out) call, growing the buffer once if needed."""
        n = c_size_t()
        with self._shared() as h:
            for _ in range(3):
                buf = (c_int32 * cap)()
                st = call(h, buf, cap, byref(n))
                if st == Status.BUFFER_TOO_SMALL and n.value > cap:
                    cap = n.value
                    continue
                self._lib.check(st)
                return buf[: n.value]
        raise AssertionError("the library kept asking for a larger buffer")  # pragma: no cover

    def detokenize(self, ids: Sequence[int], skip_special: bool = True) -> str:
        """The text of token ids (an id outside the vocabulary raises ColibriError
        INVALID_ARGUMENT)."""
        arr, count = int32_array("ids", ids)
        skip = int(check_bool("skip_special", skip_special))
        return self._text_call(
            lambda h, buf, cap, n: self._lib.colibri_detokenize(h, arr, count, skip, buf, cap, n),
            16 * count + 16,
        )

    def chat(self, messages: Iterable[Message], add_generation_prompt: bool = True) -> str:
        """Render messages with the model's chat template (``add_generation_prompt``: end with
        the assistant header). ``messages``: ``{"role", "content"}`` mappings or ``(role,
        content)`` pairs. Raises ColibriError UNSUPPORTED when the model has no template.
        To feed a conversation use ``chat_tokens``: tokenising this text reads special-token
        strings typed inside messages as control tokens."""
        arr, n, size = _chat_array(messages)
        gen = int(check_bool("add_generation_prompt", add_generation_prompt))
        return self._text_call(
            lambda h, buf, cap, out: self._lib.colibri_chat_render(h, arr, n, gen, buf, cap, out),
            256 + 2 * size,
        )

    def chat_tokens(self, messages: Iterable[Message], add_generation_prompt: bool = True) -> List[int]:
        """The conversation's prompt ids (messages as for ``chat``), with text that comes from a
        message tokenised as text: ``<|im_end|>`` typed by a user stays characters and cannot
        forge a turn; special tokens are read only where the template writes them."""
        arr, n, size = _chat_array(messages)
        gen = int(check_bool("add_generation_prompt", add_generation_prompt))
        return self._ids_call(
            lambda h, buf, cap, out: self._lib.colibri_chat_tokenize(h, arr, n, gen, buf, cap, out),
            64 + size,
        )

    def _text_call(self, call: Any, cap: int) -> str:
        """Run a (buf, cap, len_out) text call, growing the buffer once if needed."""
        lib = self._lib
        n = c_size_t()
        with self._shared() as h:
            for _ in range(3):
                buf = (c_char * cap)()
                st = call(h, buf, cap, byref(n))
                if st == Status.BUFFER_TOO_SMALL and n.value + 1 > cap:
                    cap = n.value + 1
                    continue
                lib.check(st)
                return ctypes.string_at(buf, n.value).decode("utf-8")
        raise AssertionError("the library kept asking for a larger buffer")  # pragma: no cover

    # -- embeddings --------------------------------------------------------------------------

    def embed(
        self,
        input: Union[str, Sequence[int], Sequence[Union[str, Sequence[int]]]],
        pooling: str = "mean",
        normalize: bool = True,
        *,
        add_special: bool = True,
        quant_act: str = "default",
    ) -> Any:
        """The embedding of a text or of token ids (``colibri_embed``): the model's final-normed
        hidden states (what the lm_head reads) pooled over the tokens — ``pooling`` "mean" (the
        default), "last" or "cls" (the first token's) — and with ``normalize`` scaled to unit L2
        norm. A text is tokenised with ``add_special`` (BOS etc., as :meth:`tokenize`). Returns
        one vector of ``info.hidden_size`` floats (a numpy float32 array, ``array.array("f")``
        without numpy); a list of texts or id lists gives a list of vectors, one call each. Each
        call runs in a session of its own (none of this model's sessions is touched); safe from
        several threads at once. ``quant_act`` as in :meth:`session`."""
        p = self._lib.embed_params()
        p.pooling = choice("pooling", pooling, POOLINGS)
        p.normalize = int(check_bool("normalize", normalize))
        p.quant_act = choice("quant_act", quant_act, QUANT_ACTS)
        if isinstance(input, (list, tuple)) and input and not all(_is_id(x) for x in input):
            return [self._embed_one(x, p, add_special) for x in input]
        return self._embed_one(input, p, add_special)

    def _embed_one(self, item: Any, p: Any, add_special: bool) -> Any:
        ids = self.tokenize(item, add_special) if isinstance(item, str) else item
        arr, count = int32_array("input", ids)
        h = self._info.hidden_size
        out_ptr, buf = _buffers.new_floats(h)
        n = c_size_t()
        with self._shared() as mh:
            self._lib.check(self._lib.colibri_embed(mh, as_int32_ptr(arr), count, byref(p), out_ptr, h, byref(n)))
        return buf[: n.value]

    # -- sessions ----------------------------------------------------------------------------

    def session(
        self,
        n_ctx: int = 0,
        kv_type: str = "f32",
        all_logits: bool = False,
        routing: str = "topk",
        moe_top_k: int = 0,
        routing_seed: Optional[int] = None,
        quant_act: str = "default",
        *,
        seed: Optional[int] = None,
    ) -> Session:
        """A new :class:`Session` (KV cache) on this model. ``n_ctx`` 0 = the trained context
        capped at 4096; ``kv_type`` "f32" | "f16" | "bf16"; ``all_logits``: infer returns every
        new position's logits; ``routing`` "topk" | "gumbel" with ``routing_seed`` for the
        Gumbel RNG (None = a fresh random seed; any value, 0 included, repeats exactly); ``moe_top_k`` experts per token (0 = the model's); ``quant_act`` how
        q8/q4/bf16 weights meet activations: "reduced" (int8 / bf16 activations, faster),
        "float" (activations stay f32) or "default" (``$COLIBRI_QUANT_ACT``, else reduced). ``seed`` is the deprecated name of
        ``routing_seed``. Names are case-insensitive; others raise ValueError."""
        return Session(self, n_ctx=n_ctx, kv_type=kv_type, all_logits=all_logits, routing=routing,
                       moe_top_k=moe_top_k, routing_seed=routing_seed, quant_act=quant_act, seed=seed)

    def infer_batch(self, sessions: Sequence[Session], token_lists: Sequence[Sequence[int]]) -> List[Logits]:
        """One forward step over several of this model's sessions together
        (``colibri_infer_batch``): session i gets ``token_lists[i]`` (one id to decode, or a
        prompt chunk) exactly as ``sessions[i].infer(token_lists[i])`` would, but the weights are
        read once for all. Returns one logits array per session (``(vocab,)``, or ``(n, vocab)``
        for an ``all_logits`` session). The sessions must share one ``quant_act``. A failed call
        leaves every session as it was."""
        return infer_batch(self, sessions, token_lists)

    def __repr__(self) -> str:
        if self.closed:
            return f"<colibri.Model {self.path!r} (closed)>"
        i = self._info
        return (f"<colibri.Model {self.path!r} {i.family} {i.n_layers} layers, "
                f"{i.n_experts} experts top-{i.top_k}, vocab {i.vocab_size}>")


def infer_batch(model: "Model", sessions: Sequence[Session], token_lists: Sequence[Sequence[int]]) -> List[Logits]:
    """One forward step over several sessions of `model` together (``colibri_infer_batch``):
    session i gets ``token_lists[i]`` (one id to decode, or a prompt chunk), exactly as
    ``sessions[i].infer(token_lists[i])`` would, while the model's weights are read once for
    all of them. Returns one logits array per session, shaped as its ``infer`` would return them.

    Every session must have been made from this Model object and be free (not closed; not busy:
    ColibriError BUSY); a session given twice raises ColibriError INVALID_ARGUMENT. The library
    checks the rest before anything changes — an empty token list or a session of another model
    (INVALID_ARGUMENT), a full context (CONTEXT_FULL) — so a failed call leaves every session as
    it was. An exception raised by a session's ``on_route`` callback is re-raised, and the step
    is undone for every session."""
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
    out_ptr, buf = _buffers.new_floats(need)
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
        if st == Status.ABORTED and route_errors:
            raise route_errors[0]  # the library undid the step: every session is as it was
        if err is not None:
            raise err
    finally:
        for s in held:
            s._release()
    return _buffers.split_rows(buf, rows, vocab, [s._all_logits for s in sessions])


def _is_id(x: Any) -> bool:
    """Whether `x` is one token id (an int, numpy ints included; not a bool)."""
    return not isinstance(x, bool) and hasattr(x, "__index__")


def _chat_array(messages: Iterable[Message]) -> Tuple[Any, int, int]:
    """The messages as a C array (kept alive by the array's own byte strings), their count and
    their total text size."""
    if isinstance(messages, (str, bytes, Mapping)):
        raise TypeError("messages must be a list of {'role', 'content'} mappings or (role, content) pairs")
    structs: List[Tuple[bytes, bytes]] = []
    for i, m in enumerate(messages):
        if isinstance(m, Mapping):
            if "role" not in m or "content" not in m:
                raise ValueError(f"messages[{i}] needs 'role' and 'content'")
            role, content = m["role"], m["content"]
        elif isinstance(m, (tuple, list)) and len(m) == 2:
            role, content = m[0], m[1]
        else:
            raise TypeError(f"messages[{i}] must be a mapping or a (role, content) pair, not {type(m).__name__}")
        structs.append(
            (encode_text(f"messages[{i}].role", role, allow_nul=False),
             encode_text(f"messages[{i}].content", content, allow_nul=False))
        )
    n = len(structs)
    arr = (ChatMessage * max(n, 1))()
    for i, (r, c) in enumerate(structs):
        arr[i].role = r
        arr[i].content = c
    arr._keep = structs  # type: ignore[attr-defined]
    return arr, n, sum(len(r) + len(c) for r, c in structs)
