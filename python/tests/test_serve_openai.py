"""`colibri serve` through the official `openai` Python client: completions and chat, whole and
streamed (with usage), n choices, logit_bias, chat logprobs, a model alias, the model list, and
errors mapped to the client's exception types.
The server is target/release/colibri on the shipped default model, on a free loopback port."""

from __future__ import annotations

import json
import subprocess
import threading
import urllib.request
from typing import Iterator

import openai
import pytest

from conftest import CLI, REPO, _need_build

MODEL = REPO / "models" / "default.colibri"
KEY = "test-key-123"


@pytest.fixture(scope="module")
def client() -> Iterator[openai.OpenAI]:
    _need_build()
    proc = subprocess.Popen(
        [str(CLI), "serve", "-m", str(MODEL), "--port", "0", "-t", "1", "--api-key", KEY, "--alias", "gpt-4o-mini"],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        text=True,
    )
    assert proc.stderr is not None
    found: list[str] = []
    ready = threading.Event()

    def read_log() -> None:
        assert proc.stderr is not None
        for line in proc.stderr:
            if line.startswith("listening on http://"):
                found.append(line.split("http://", 1)[1].strip())
            if line.startswith("model ") and "ready" in line:
                ready.set()

    threading.Thread(target=read_log, daemon=True).start()
    try:
        assert ready.wait(60), "the server did not become ready"
        yield openai.OpenAI(base_url=f"http://{found[0]}/v1", api_key=KEY, max_retries=0, timeout=60)
    finally:
        proc.terminate()
        assert proc.wait(60) == 0


def test_models_list(client: openai.OpenAI) -> None:
    ids = [m.id for m in client.models.list()]
    assert ids == ["default", "gpt-4o-mini"]


def test_completion_whole_and_streamed(client: openai.OpenAI) -> None:
    r = client.completions.create(model="default", prompt="And the LORD said", max_tokens=10, temperature=0)
    text = r.choices[0].text
    assert text and r.choices[0].finish_reason == "length"
    assert r.usage is not None and r.usage.completion_tokens == 10
    chunks = list(
        client.completions.create(
            model="default",
            prompt="And the LORD said",
            max_tokens=10,
            temperature=0,
            stream=True,
            stream_options={"include_usage": True},
        )
    )
    assert "".join(c.choices[0].text for c in chunks if c.choices) == text
    assert [c.choices[0].finish_reason for c in chunks if c.choices][-1] == "length"
    assert chunks[-1].usage is not None and chunks[-1].usage.completion_tokens == 10


def test_chat_whole_and_streamed(client: openai.OpenAI) -> None:
    messages = [{"role": "user", "content": "Who made the heaven and the earth?"}]
    r = client.chat.completions.create(model="default", messages=messages, max_tokens=12, temperature=0, seed=1)
    msg = r.choices[0].message
    assert msg.role == "assistant" and msg.content
    assert r.choices[0].finish_reason in ("length", "stop")
    stream = client.chat.completions.create(
        model="default", messages=messages, max_tokens=12, temperature=0, seed=1, stream=True
    )
    chunks = list(stream)
    assert chunks[0].choices[0].delta.role == "assistant"
    assert "".join(c.choices[0].delta.content or "" for c in chunks) == msg.content
    assert chunks[-1].choices[0].finish_reason == r.choices[0].finish_reason


def test_errors_map_to_client_exceptions(client: openai.OpenAI) -> None:
    with pytest.raises(openai.NotFoundError) as nf:
        client.completions.create(model="gpt-4", prompt="a", max_tokens=1)
    assert nf.value.code == "model_not_found"
    with pytest.raises(openai.BadRequestError) as br:
        client.completions.create(model="default", prompt="a", max_tokens=1, temperature=-1)
    assert br.value.param == "temperature"
    bad = openai.OpenAI(base_url=client.base_url, api_key="wrong", max_retries=0)
    with pytest.raises(openai.AuthenticationError):
        bad.models.list()


def test_n_choices_whole_and_streamed(client: openai.OpenAI) -> None:
    kw = dict(model="gpt-4o-mini", prompt="In the beginning", max_tokens=6, seed=11, n=3, extra_body={"ignore_eos": True})
    r = client.completions.create(**kw)
    assert [c.index for c in r.choices] == [0, 1, 2]
    assert r.usage is not None and r.usage.completion_tokens == 18
    # Choice i repeats as choice 0 of a request seeded seed + i.
    for c in r.choices:
        one = client.completions.create(**{**kw, "n": 1, "seed": 11 + c.index})
        assert one.choices[0].text == c.text
    texts = {i: "" for i in range(3)}
    for chunk in client.completions.create(**kw, stream=True):
        for c in chunk.choices:
            texts[c.index] += c.text
    assert [texts[i] for i in range(3)] == [c.text for c in r.choices]
    chat = client.chat.completions.create(
        model="default", messages=[{"role": "user", "content": "Hi"}], max_tokens=4, n=2, seed=3
    )
    assert [c.index for c in chat.choices] == [0, 1]


def test_logit_bias_forces_a_token(client: openai.OpenAI) -> None:
    r = client.completions.create(
        model="default", prompt="And the LORD said", max_tokens=4, temperature=0, logit_bias={"300": 100}
    )
    forced = r.choices[0].text
    assert forced == _post(client, "/detokenize", {"tokens": [300]})["content"] * 4
    ids = _post(client, "/tokenize", {"content": "And the LORD said"})["tokens"]
    assert _post(client, "/detokenize", {"tokens": ids})["content"] == "And the LORD said"


def _post(client: openai.OpenAI, path: str, body: dict) -> dict:
    """POST JSON to a non-OpenAI endpoint of the same server."""
    root = str(client.base_url).rstrip("/").removesuffix("/v1")
    req = urllib.request.Request(
        root + path,
        data=json.dumps(body).encode(),
        headers={"Content-Type": "application/json", "Authorization": f"Bearer {KEY}"},
    )
    with urllib.request.urlopen(req, timeout=60) as resp:
        return json.loads(resp.read())


def test_chat_logprobs_whole_and_streamed(client: openai.OpenAI) -> None:
    kw = dict(
        model="default",
        messages=[{"role": "user", "content": "Who made the earth?"}],
        max_tokens=5,
        temperature=0,
        logprobs=True,
        top_logprobs=3,
    )
    r = client.chat.completions.create(**kw)
    lp = r.choices[0].logprobs
    assert lp is not None and lp.content
    assert "".join(t.token for t in lp.content) == r.choices[0].message.content
    for t in lp.content:
        assert t.logprob <= 0 and len(t.top_logprobs) == 3 and bytes(t.bytes or []).decode() == t.token
        assert t.top_logprobs[0].logprob >= t.logprob - 1e-6
    streamed = [
        t for c in client.chat.completions.create(**kw, stream=True) if c.choices and c.choices[0].logprobs
        for t in c.choices[0].logprobs.content or []
    ]
    assert [(t.token, round(t.logprob, 4)) for t in streamed] == [(t.token, round(t.logprob, 4)) for t in lp.content]
