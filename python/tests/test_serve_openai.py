"""`colibri serve` through the official `openai` Python client: completions and chat, whole and
streamed (with usage), n choices, logit_bias, chat logprobs, a model alias, the model list,
errors mapped to the client's exception types, and embeddings: a string and a batch (the client's
default base64 encoding and explicit floats give the same vectors), token-id input, usage, unit norms, `dimensions` refused unless it is the hidden
size, and each text's vector equal to the binding's `Model.embed` on the same model. (Embedded
next to others, a text of this bf16 model may differ from itself alone in the last bf16 bit of
some activations: within 2e-3.)
The server is target/release/colibri on the shipped default model, on a free loopback port."""

from __future__ import annotations

import json
import math
import urllib.request
from typing import Iterator, List

import openai
import pytest

import colibri
from conftest import REPO, serve_openai

MODEL = REPO / "models" / "default.colibri"
KEY = "test-key-123"
TEXTS = ["In the beginning God created the heaven and the earth.", "And God said", "Amen."]


@pytest.fixture(scope="module")
def client() -> Iterator[openai.OpenAI]:
    yield from serve_openai(["--api-key", KEY, "--alias", "gpt-4o-mini"], api_key=KEY)


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
def vectors(r: openai.types.CreateEmbeddingResponse) -> List[List[float]]:
    assert r.object == "list" and r.model == "default"
    assert [d.index for d in r.data] == list(range(len(r.data)))
    assert all(d.object == "embedding" for d in r.data)
    return [list(d.embedding) for d in r.data]


def test_batch_base64_and_float_agree_with_the_binding(client: openai.OpenAI) -> None:
    r = client.embeddings.create(model="default", input=TEXTS)  # the client asks for base64
    got = vectors(r)
    assert len(got) == 3 and all(len(v) == 256 for v in got)
    assert all(abs(math.sqrt(sum(x * x for x in v)) - 1.0) < 1e-5 for v in got)
    floats = client.embeddings.create(model="default", input=TEXTS, encoding_format="float")
    assert vectors(floats) == got
    with colibri.Model(MODEL) as m:
        ids = [m.tokenize(t, add_special=True) for t in TEXTS]
        assert r.usage.prompt_tokens == r.usage.total_tokens == sum(len(i) for i in ids)
        mine = m.embed(TEXTS)  # one text per call
    for t, v, batched in zip(TEXTS, mine, got):
        alone = vectors(client.embeddings.create(model="default", input=t))[0]
        assert [float(x) for x in v] == alone
        assert max(abs(a - b) for a, b in zip(alone, batched)) <= 2e-3


def test_one_string_token_ids_and_dimensions(client: openai.OpenAI) -> None:
    one = vectors(client.embeddings.create(model="default", input=TEXTS[1], dimensions=256))
    with colibri.Model(MODEL) as m:
        ids = m.tokenize(TEXTS[1], add_special=True)
    by_ids = vectors(client.embeddings.create(model="default", input=ids))
    assert by_ids == one
    with pytest.raises(openai.BadRequestError) as e:
        client.embeddings.create(model="default", input="a", dimensions=64)
    assert e.value.param == "dimensions"
    with pytest.raises(openai.NotFoundError):
        client.embeddings.create(model="text-embedding-3-small", input="a")
