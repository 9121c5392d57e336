"""`colibri serve`'s /v1/embeddings through the official `openai` Python client: a string and a
batch (the client's default base64 encoding and explicit floats give the same vectors), token-id
input, usage, unit norms, `dimensions` refused unless it is the hidden size, and each text's vector
equal to the binding's `Model.embed` on the same model. (Embedded next to others, a text of this
bf16 model may differ from itself alone in the last bf16 bit of some activations: within 2e-3.)"""

from __future__ import annotations

import math
import subprocess
import threading
from typing import Iterator, List

import openai
import pytest

import colibri
from conftest import CLI, REPO, _need_build

MODEL = REPO / "models" / "default.colibri"
TEXTS = ["In the beginning God created the heaven and the earth.", "And God said", "Amen."]


@pytest.fixture(scope="module")
def client() -> Iterator[openai.OpenAI]:
    _need_build()
    proc = subprocess.Popen(
        [str(CLI), "serve", "-m", str(MODEL), "--port", "0", "-t", "1"],
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
        yield openai.OpenAI(base_url=f"http://{found[0]}/v1", api_key="unused", max_retries=0, timeout=60)
    finally:
        proc.terminate()
        assert proc.wait(60) == 0


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
