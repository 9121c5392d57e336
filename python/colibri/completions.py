"""``Colibri``: the high-level API in the shape llama-cpp-python's ``Llama`` has —
``create_completion`` and ``create_chat_completion``, whole or streamed, returning the OpenAI
API's dicts (``text_completion`` / ``chat.completion`` and their ``*.chunk`` stream pieces). It
owns a :class:`colibri.Model` and runs each call on a session of its own (reset between calls),
so calls from several threads run in parallel. Sampling, stop strings and finish reasons are
the library's (:meth:`colibri.Session.complete`); this module only shapes requests and
responses.

Imports go one way: this module imports :mod:`colibri.model`, never the reverse."""

from __future__ import annotations

import random
import threading
import time
import uuid
from typing import Any, Dict, Iterator, List, Mapping, Optional, Sequence, Union

from ._args import UINT64_MAX, check_int
from .generation import GenerationResult, Prompt, Stop
from .model import Message, Model, PathLike
from .session import Session

__all__ = ["Colibri", "openai_finish_reason"]

#: A chat message: ``{"role": ..., "content": str}`` (content may also be a list of
#: ``{"type": "text", "text": ...}`` parts, joined).
ChatMessage = Mapping[str, Any]


def openai_finish_reason(reason: str) -> Optional[str]:
    """The OpenAI API's word for a colibri finish reason: "stop" for a stop string or an
    end-of-sequence token, "length" for max_tokens or a full context; None (still running) for
    "callback", which only a stream closed early gives."""
    return {"stop": "stop", "eos": "stop", "length": "length", "context_full": "length"}.get(reason)


def _text_content(i: int, content: Any) -> str:
    """A message's content as text: a str, or the text parts of a list of content parts."""
    if isinstance(content, str):
        return content
    if isinstance(content, (list, tuple)):
        texts = []
        for j, part in enumerate(content):
            if not isinstance(part, Mapping) or part.get("type") != "text" or not isinstance(part.get("text"), str):
                raise ValueError(f"messages[{i}].content[{j}]: only {{'type': 'text', 'text': str}} parts are supported")
            texts.append(part["text"])
        return "".join(texts)
    raise TypeError(f"messages[{i}].content must be a str or a list of text parts, not {type(content).__name__}")


def _chat_messages(messages: Sequence[ChatMessage]) -> List[Message]:
    if isinstance(messages, (str, bytes, Mapping)) or not hasattr(messages, "__iter__"):
        raise TypeError("messages must be a list of {'role', 'content'} dicts")
    out: List[Message] = []
    for i, m in enumerate(messages):
        if not isinstance(m, Mapping) or "role" not in m:
            raise ValueError(f"messages[{i}] must be a dict with 'role' and 'content'")
        extra = set(m) - {"role", "content", "name"}
        if extra:  # tool calls, tool results...: refused rather than silently dropped
            raise ValueError(f"messages[{i}] has fields this API does not support: {', '.join(sorted(extra))}")
        out.append({"role": m["role"], "content": _text_content(i, m.get("content") or "")})
    return out


class Colibri:
    """A model with llama-cpp-python's high-level calls.

    ``Colibri(model_path, *, n_ctx=0, n_threads=0, seed=None, kv_type="f32", mmap=True,
    mlock=False, model_name=None)``: ``n_ctx`` is each call's context (0 = the model's trained
    context capped at 4096), ``n_threads`` the model's worker threads (0 = one per physical
    core), ``model_name`` the ``model`` field of the responses (default: the path).
    ``seed``: None (default) gives every call a fresh random seed, as llama.cpp does; an int
    makes the sequence of calls reproducible (call i samples with the i-th seed of a generator
    seeded with it). A ``seed=`` given to a call wins over both.

    ``create_completion`` (also ``__call__``) and ``create_chat_completion`` return the OpenAI
    dicts, or with ``stream=True`` an iterator of chunk dicts whose texts concatenate to what
    the same call without ``stream`` returns (same seed, same text). ``close()`` or ``with``
    frees the model; the object is usable from several threads at once."""

    def __init__(
        self,
        model_path: PathLike,
        *,
        n_ctx: int = 0,
        n_threads: int = 0,
        seed: Optional[int] = None,
        kv_type: str = "f32",
        mmap: bool = True,
        mlock: bool = False,
        model_name: Optional[str] = None,
    ) -> None:
        self.model = Model(model_path, mmap=mmap, mlock=mlock, n_threads=n_threads)
        self.model_name = model_name if model_name is not None else str(self.model.path)
        self._session_args = {"n_ctx": n_ctx, "kv_type": kv_type}
        self._seeds = None if seed is None else random.Random(check_int("seed", seed, 0, UINT64_MAX))
        self._lock = threading.Lock()
        self._idle: List[Session] = []
        try:
            first = self._take_session()  # checks the session options now
        except BaseException:
            self.model.close()
            raise
        self.n_ctx = first.n_ctx
        self._give_back(first)

    # -- sessions ----------------------------------------------------------------------------

    def _take_session(self) -> Session:
        with self._lock:
            if self._idle:
                return self._idle.pop()
        return self.model.session(**self._session_args)  # type: ignore[arg-type]

    def _give_back(self, s: Session) -> None:
        if not s.closed:
            s.reset()
            with self._lock:
                if not self._idle:
                    self._idle.append(s)
                    return
        s.close()

    def _seed(self, seed: Optional[int]) -> Optional[int]:
        if seed is not None or self._seeds is None:
            return seed
        with self._lock:
            return self._seeds.getrandbits(63)

    # -- the calls ---------------------------------------------------------------------------

    def _prompt_ids(self, prompt: Prompt) -> List[int]:
        ids = self.model.tokenize(prompt) if isinstance(prompt, str) else [int(t) for t in prompt]
        if not ids:
            raise ValueError("the prompt has no tokens")
        if len(ids) >= self.n_ctx:
            raise ValueError(f"the prompt has {len(ids)} tokens; the context holds {self.n_ctx} "
                             "(prompt and completion together)")
        return ids

    def _run(self, ids: List[int], max_tokens: Optional[int], stream: bool, options: Dict[str, Any]) -> Any:
        """A GenerationResult, or with `stream` an iterator of text pieces then the result."""
        room = self.n_ctx - len(ids)
        n = room if max_tokens is None or max_tokens <= 0 else min(check_int("max_tokens", max_tokens, 1, 2**31 - 1), room)
        options = dict(options, seed=self._seed(options.get("seed")), max_tokens=n, add_special=False)
        s = self._take_session()
        if not stream:
            try:
                return s.complete(ids, **options)
            finally:
                self._give_back(s)
        try:
            pieces = s.generate(ids, **options)  # checks the options before the first next()
        except BaseException:
            self._give_back(s)
            raise
        return self._pieces(s, pieces)

    def _pieces(self, s: Session, pieces: Iterator[str]) -> Iterator[Union[str, GenerationResult]]:
        try:
            yield from pieces
            assert s.last_result is not None
            yield s.last_result
        finally:
            pieces.close()  # type: ignore[attr-defined]  # stops generation when left early
            self._give_back(s)

    def create_completion(
        self,
        prompt: Prompt,
        max_tokens: Optional[int] = 16,
        temperature: Optional[float] = None,
        top_p: Optional[float] = None,
        min_p: Optional[float] = None,
        top_k: Optional[int] = None,
        stop: Stop = None,
        seed: Optional[int] = None,
        stream: bool = False,
        frequency_penalty: Optional[float] = None,
        presence_penalty: Optional[float] = None,
        repeat_penalty: Optional[float] = None,
        logprobs: Optional[int] = None,
    ) -> Any:
        """Complete `prompt` (text, tokenised with the model's special tokens, or token ids) and
        return a ``text_completion`` dict, or with ``stream=True`` an iterator of its chunks
        (each ``choices[0].text`` a piece, the last with ``finish_reason``).

        ``max_tokens`` (default 16; None or ≤ 0: until the context is full) is capped at the
        room the context leaves. Sampling options left at None take the library's defaults:
        ``temperature`` 0.8 (0 = greedy), ``top_p`` 0.95, ``min_p`` 0.05, ``top_k`` 40,
        ``repeat_penalty`` 1 (off), ``presence_penalty`` / ``frequency_penalty`` 0.
        ``stop``: a string or a list; the text ends before the first one (finish reason "stop",
        as for an end-of-sequence token; "length" for ``max_tokens`` or a full context).
        ``seed``: see the class. ``logprobs`` is not supported (ValueError unless None)."""
        if logprobs is not None:
            raise ValueError("logprobs is not supported")
        ids = self._prompt_ids(prompt)
        options = _options(temperature, top_p, min_p, top_k, stop, seed, frequency_penalty, presence_penalty,
                           repeat_penalty)
        head = self._head("cmpl", "text_completion")
        out = self._run(ids, max_tokens, stream, options)
        if stream:
            return self._completion_chunks(head, out)
        return dict(head, choices=[{"text": out.text, "index": 0, "logprobs": None,
                                    "finish_reason": openai_finish_reason(out.finish_reason)}],
                    usage=_usage(out))

    __call__ = create_completion

    def create_chat_completion(
        self,
        messages: Sequence[ChatMessage],
        max_tokens: Optional[int] = None,
        temperature: Optional[float] = None,
        top_p: Optional[float] = None,
        min_p: Optional[float] = None,
        top_k: Optional[int] = None,
        stop: Stop = None,
        seed: Optional[int] = None,
        stream: bool = False,
        frequency_penalty: Optional[float] = None,
        presence_penalty: Optional[float] = None,
        repeat_penalty: Optional[float] = None,
        logprobs: Optional[bool] = None,
    ) -> Any:
        """Answer a conversation rendered with the model's chat template
        (:meth:`colibri.Model.chat_tokens`: text typed in a message never becomes a control
        token) and return a ``chat.completion`` dict, or with ``stream=True`` an iterator of
        ``chat.completion.chunk`` dicts (a first ``delta`` with the role, then content pieces,
        then an empty delta with ``finish_reason``). ``messages``: ``{"role", "content"}``
        dicts (content a str or a list of text parts). ``max_tokens`` None (default): until
        an end-of-sequence token or the context is full. Other options as
        :meth:`create_completion`. A model without a chat template raises ColibriError
        UNSUPPORTED; ``logprobs`` is not supported (ValueError unless None / False)."""
        if logprobs:
            raise ValueError("logprobs is not supported")
        ids = self._prompt_ids(self.model.chat_tokens(_chat_messages(messages)))
        options = _options(temperature, top_p, min_p, top_k, stop, seed, frequency_penalty, presence_penalty,
                           repeat_penalty)
        head = self._head("chatcmpl", "chat.completion")
        out = self._run(ids, max_tokens, stream, options)
        if stream:
            return self._chat_chunks(dict(head, object="chat.completion.chunk"), out)
        message = {"role": "assistant", "content": out.text}
        return dict(head, choices=[{"index": 0, "message": message, "logprobs": None,
                                    "finish_reason": openai_finish_reason(out.finish_reason)}],
                    usage=_usage(out))

    # -- embeddings --------------------------------------------------------------------------

    def create_embedding(
        self, input: Union[str, Sequence[int], Sequence[Union[str, Sequence[int]]]], *, pooling: str = "mean",
        normalize: bool = True,
    ) -> Dict[str, Any]:
        """OpenAI's embeddings response for ``input`` (a string, token ids, or a list of those):
        ``{"object": "list", "data": [{"object": "embedding", "index", "embedding"}], "model",
        "usage"}``, each vector the model's final-normed hidden states pooled over the input's
        tokens (``pooling`` "mean" | "last" | "cls") and L2-normalised (:meth:`Model.embed`)."""
        items = list(input) if _is_list_of_inputs(input) else [input]
        data, used = [], 0
        for i, item in enumerate(items):
            ids = self.model.tokenize(item, add_special=True) if isinstance(item, str) else list(item)
            used += len(ids)
            vector = self.model.embed(ids, pooling=pooling, normalize=normalize)
            data.append({"object": "embedding", "index": i, "embedding": [float(x) for x in vector]})
        return {"object": "list", "data": data, "model": self.model_name,
                "usage": {"prompt_tokens": used, "total_tokens": used}}

    def embed(
        self, input: Union[str, Sequence[int], Sequence[Union[str, Sequence[int]]]], *, pooling: str = "mean",
        normalize: bool = True,
    ) -> Union[List[float], List[List[float]]]:
        """The vectors of :meth:`create_embedding` alone: one list of floats for a string or an
        id list, a list of them for a list of inputs."""
        vectors = [d["embedding"] for d in self.create_embedding(input, pooling=pooling, normalize=normalize)["data"]]
        return vectors if _is_list_of_inputs(input) else vectors[0]

    # -- response shapes ---------------------------------------------------------------------

    def _head(self, prefix: str, obj: str) -> Dict[str, Any]:
        return {"id": f"{prefix}-{uuid.uuid4().hex}", "object": obj, "created": int(time.time()),
                "model": self.model_name}

    @staticmethod
    def _completion_chunks(head: Dict[str, Any], items: Iterator[Any]) -> Iterator[Dict[str, Any]]:
        for item in items:
            if isinstance(item, GenerationResult):
                reason = openai_finish_reason(item.finish_reason)
                yield dict(head, choices=[{"text": "", "index": 0, "logprobs": None, "finish_reason": reason}])
            else:
                yield dict(head, choices=[{"text": item, "index": 0, "logprobs": None, "finish_reason": None}])

    @staticmethod
    def _chat_chunks(head: Dict[str, Any], items: Iterator[Any]) -> Iterator[Dict[str, Any]]:
        yield dict(head, choices=[{"index": 0, "delta": {"role": "assistant"}, "logprobs": None, "finish_reason": None}])
        for item in items:
            if isinstance(item, GenerationResult):
                reason = openai_finish_reason(item.finish_reason)
                yield dict(head, choices=[{"index": 0, "delta": {}, "logprobs": None, "finish_reason": reason}])
            else:
                yield dict(head, choices=[{"index": 0, "delta": {"content": item}, "logprobs": None,
                                           "finish_reason": None}])

    # -- lifetime ----------------------------------------------------------------------------

    def close(self) -> None:
        """Free the idle session and the model (idempotent; running streams keep theirs)."""
        with self._lock:
            idle, self._idle = self._idle, []
        for s in idle:
            s.close()
        self.model.close()

    def __enter__(self) -> "Colibri":
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()

    def __repr__(self) -> str:
        return f"<colibri.Colibri {self.model_name!r} n_ctx={self.n_ctx}>"


def _is_list_of_inputs(x: Any) -> bool:
    """A list of texts / id lists (not one id list)."""
    return isinstance(x, (list, tuple)) and bool(x) and not all(isinstance(v, int) for v in x)


def _options(
    temperature: Optional[float], top_p: Optional[float], min_p: Optional[float], top_k: Optional[int],
    stop: Stop, seed: Optional[int], frequency_penalty: Optional[float], presence_penalty: Optional[float],
    repeat_penalty: Optional[float],
) -> Dict[str, Any]:
    """The keyword options of :meth:`colibri.Session.complete` (llama-cpp-python's
    ``repeat_penalty`` is the library's ``repetition_penalty``)."""
    return dict(temperature=temperature, top_p=top_p, min_p=min_p, top_k=top_k, stop=stop, seed=seed,
                frequency_penalty=frequency_penalty, presence_penalty=presence_penalty,
                repetition_penalty=repeat_penalty)


def _usage(r: GenerationResult) -> Dict[str, int]:
    return {"prompt_tokens": r.prompt_tokens, "completion_tokens": r.completion_tokens,
            "total_tokens": r.prompt_tokens + r.completion_tokens}
