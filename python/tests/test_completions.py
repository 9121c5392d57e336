"""colibri.Colibri, the llama-cpp-python-shaped API, on the shipped default model: the OpenAI
dict shapes (whole and streamed), stop strings, finish reasons, usage, seeds (explicit,
per-object, random) and that a stream concatenates to the whole answer of the same seed."""

from __future__ import annotations

import threading
from typing import Any, Dict, Iterator, List

import pytest

from conftest import REPO

import colibri

MODEL = REPO / "models" / "default.colibri"
PROMPT = "In the beginning God created"
CHAT = [{"role": "user", "content": "Who made the heaven and the earth?"}]


@pytest.fixture(scope="module")
def llm() -> Iterator[colibri.Colibri]:
    with colibri.Colibri(MODEL, n_threads=2, model_name="default") as c:
        yield c


def _check_head(r: Dict[str, Any], obj: str, prefix: str) -> None:
    assert r["object"] == obj
    assert r["id"].startswith(prefix + "-") and len(r["id"]) > len(prefix) + 8
    assert isinstance(r["created"], int) and r["created"] > 1_600_000_000
    assert r["model"] == "default"
    assert len(r["choices"]) == 1 and r["choices"][0]["index"] == 0
    assert r["choices"][0]["logprobs"] is None


def test_completion_shape_and_usage(llm: colibri.Colibri) -> None:
    r = llm.create_completion(PROMPT, max_tokens=12, temperature=0, seed=0)
    _check_head(r, "text_completion", "cmpl")
    assert set(r) == {"id", "object", "created", "model", "choices", "usage"}
    choice = r["choices"][0]
    assert set(choice) == {"text", "index", "logprobs", "finish_reason"}
    assert isinstance(choice["text"], str) and choice["text"]
    n_prompt = len(llm.model.tokenize(PROMPT))
    u = r["usage"]
    assert u["prompt_tokens"] == n_prompt
    assert u["total_tokens"] == u["prompt_tokens"] + u["completion_tokens"]
    if choice["finish_reason"] == "length":
        assert u["completion_tokens"] == 12
    else:
        assert choice["finish_reason"] == "stop" and u["completion_tokens"] < 12
    # The same text as the session-level API with the same options.
    with llm.model.session() as s:
        assert s.complete(PROMPT, max_tokens=12, temperature=0, seed=0).text == choice["text"]
    assert llm(PROMPT, max_tokens=12, temperature=0, seed=0)["choices"][0]["text"] == choice["text"]


def test_stop_string_ends_the_text_before_it(llm: colibri.Colibri) -> None:
    full = llm.create_completion(PROMPT, max_tokens=40, temperature=0, seed=3)["choices"][0]["text"]
    assert len(full) > 8
    stop = full[4:7]  # a string the unstopped text contains
    cut = full.index(stop)
    r = llm.create_completion(PROMPT, max_tokens=40, temperature=0, seed=3, stop=[stop, "\x7f"])
    assert r["choices"][0]["text"] == full[:cut]
    assert r["choices"][0]["finish_reason"] == "stop"
    assert r["usage"]["completion_tokens"] < 40


def test_finish_reason_length_and_context_room(llm: colibri.Colibri) -> None:
    r = llm.create_completion(PROMPT, max_tokens=5, temperature=1.0, seed=1)
    assert r["choices"][0]["finish_reason"] in ("length", "stop")
    # max_tokens beyond the context's room is capped there: "length" from the full context.
    ids = llm.model.tokenize(PROMPT)
    r = llm.create_completion(ids, max_tokens=10_000, temperature=0, seed=1)
    assert r["usage"]["completion_tokens"] <= llm.n_ctx - len(ids)
    with pytest.raises(ValueError, match="context"):
        llm.create_completion([5] * llm.n_ctx, max_tokens=1)
    with pytest.raises(ValueError, match="logprobs"):
        llm.create_completion(PROMPT, logprobs=1)
    with pytest.raises(TypeError):
        llm.create_completion(PROMPT, n=2)  # type: ignore[call-arg]  # never silently ignored


def test_seed_reproduces_and_none_varies(llm: colibri.Colibri) -> None:
    kw: Dict[str, Any] = dict(max_tokens=24, temperature=1.5, top_k=0, top_p=1.0, min_p=0.0)
    a = llm.create_completion(PROMPT, seed=1234, **kw)["choices"][0]["text"]
    b = llm.create_completion(PROMPT, seed=1234, **kw)["choices"][0]["text"]
    assert a == b
    randoms = {llm.create_completion(PROMPT, **kw)["choices"][0]["text"] for _ in range(4)}
    assert len(randoms) > 1  # a fresh seed per call
    # An object seed makes the sequence of calls reproducible, not every call the same.
    with colibri.Colibri(MODEL, n_threads=2, seed=7) as x, colibri.Colibri(MODEL, n_threads=2, seed=7) as y:
        xs = [x.create_completion(PROMPT, **kw)["choices"][0]["text"] for _ in range(3)]
        ys = [y.create_completion(PROMPT, **kw)["choices"][0]["text"] for _ in range(3)]
    assert xs == ys and len(set(xs)) > 1


def _stream_text(chunks: List[Dict[str, Any]], key: str) -> str:
    if key == "text":
        return "".join(c["choices"][0]["text"] for c in chunks)
    return "".join(c["choices"][0]["delta"].get("content", "") for c in chunks)


@pytest.mark.parametrize("stop", [None, ["the"]])
def test_completion_stream_concatenates_to_the_whole(llm: colibri.Colibri, stop: Any) -> None:
    kw: Dict[str, Any] = dict(max_tokens=32, temperature=0.9, seed=42, stop=stop)
    whole = llm.create_completion(PROMPT, **kw)
    chunks = list(llm.create_completion(PROMPT, stream=True, **kw))
    assert len(chunks) >= 2
    head = chunks[0]
    for c in chunks:
        _check_head(c, "text_completion", "cmpl")
        assert c["id"] == head["id"] and c["created"] == head["created"]
        assert "usage" not in c
    assert all(c["choices"][0]["finish_reason"] is None for c in chunks[:-1])
    assert chunks[-1]["choices"][0]["finish_reason"] == whole["choices"][0]["finish_reason"]
    assert _stream_text(chunks, "text") == whole["choices"][0]["text"]


def test_chat_completion_shape(llm: colibri.Colibri) -> None:
    r = llm.create_chat_completion(CHAT, max_tokens=16, temperature=0, seed=0)
    _check_head(r, "chat.completion", "chatcmpl")
    choice = r["choices"][0]
    assert set(choice) == {"index", "message", "logprobs", "finish_reason"}
    assert choice["message"]["role"] == "assistant" and isinstance(choice["message"]["content"], str)
    assert choice["finish_reason"] in ("stop", "length")
    assert r["usage"]["prompt_tokens"] == len(llm.model.chat_tokens(CHAT))
    # The same prompt ids as the template gives, so the same text as a session fed them.
    with llm.model.session() as s:
        want = s.complete(llm.model.chat_tokens(CHAT), max_tokens=16, temperature=0, seed=0).text
    assert choice["message"]["content"] == want
    parts = [{"role": "user", "content": [{"type": "text", "text": "Who made the heaven "},
                                          {"type": "text", "text": "and the earth?"}]}]
    same = llm.create_chat_completion(parts, max_tokens=16, temperature=0, seed=0)
    assert same["choices"][0]["message"]["content"] == want
    with pytest.raises(ValueError, match="tool_calls"):
        llm.create_chat_completion([{"role": "assistant", "content": None, "tool_calls": []}])


def test_chat_stream_concatenates_to_the_whole(llm: colibri.Colibri) -> None:
    kw: Dict[str, Any] = dict(max_tokens=24, temperature=0.8, seed=9)
    whole = llm.create_chat_completion(CHAT, **kw)
    chunks = list(llm.create_chat_completion(CHAT, stream=True, **kw))
    for c in chunks:
        _check_head(c, "chat.completion.chunk", "chatcmpl")
    assert chunks[0]["choices"][0]["delta"] == {"role": "assistant"}
    assert chunks[-1]["choices"][0]["delta"] == {}
    assert chunks[-1]["choices"][0]["finish_reason"] == whole["choices"][0]["finish_reason"]
    assert all(c["choices"][0]["finish_reason"] is None for c in chunks[:-1])
    assert _stream_text(chunks, "content") == whole["choices"][0]["message"]["content"]


def test_a_stream_left_early_frees_its_session(llm: colibri.Colibri) -> None:
    stream = llm.create_completion(PROMPT, max_tokens=64, temperature=0, seed=0, stream=True)
    next(stream)
    stream.close()  # stops generation; the next call works (and reuses the session)
    r = llm.create_completion(PROMPT, max_tokens=4, temperature=0, seed=0)
    assert r["usage"]["prompt_tokens"] == len(llm.model.tokenize(PROMPT))


def test_bad_options_raise_before_anything_runs() -> None:
    with pytest.raises(ValueError, match="kv_type"):
        colibri.Colibri(MODEL, kv_type="f8")
    with colibri.Colibri(MODEL, n_ctx=64, n_threads=1) as small:
        assert small.n_ctx == 64
        with pytest.raises(ValueError, match="context"):
            small.create_completion(list(range(1, 65)))
        with pytest.raises(TypeError):
            small.create_completion(PROMPT, temperature="hot")


def test_threads_run_calls_at_once(llm: colibri.Colibri) -> None:
    want = llm.create_completion(PROMPT, max_tokens=8, temperature=0.7, seed=5)["choices"][0]["text"]
    got: List[str] = []
    errors: List[BaseException] = []

    def work() -> None:
        try:
            got.append(llm.create_completion(PROMPT, max_tokens=8, temperature=0.7, seed=5)["choices"][0]["text"])
        except BaseException as e:  # pragma: no cover - reported below
            errors.append(e)

    threads = [threading.Thread(target=work) for _ in range(3)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert not errors and got == [want] * 3


def test_create_embedding_shape_and_vectors(llm: colibri.Colibri) -> None:
    texts = ["In the beginning", "And God said"]
    r = llm.create_embedding(texts)
    assert r["object"] == "list" and r["model"] == llm.model_name
    assert [d["index"] for d in r["data"]] == [0, 1]
    ids = [llm.model.tokenize(t, add_special=True) for t in texts]
    assert r["usage"] == {"prompt_tokens": sum(map(len, ids)), "total_tokens": sum(map(len, ids))}
    for d, t in zip(r["data"], texts):
        v = d["embedding"]
        assert len(v) == llm.model.info.hidden_size
        assert abs(sum(x * x for x in v) - 1.0) < 1e-4
        assert v == [float(x) for x in llm.model.embed(t)]
    assert llm.embed(texts[0]) == r["data"][0]["embedding"]
    assert llm.embed(ids[1]) == r["data"][1]["embedding"]
    assert llm.embed(texts) == [d["embedding"] for d in r["data"]]
    last = llm.embed(texts[0], pooling="last")
    assert last != r["data"][0]["embedding"]
