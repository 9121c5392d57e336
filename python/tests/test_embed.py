"""Model.embed (``colibri_embed``) against transformers' final-normed hidden states of the
fixture's prompt (oracle/hidden_f32.npy, tools/make_embedding_fixtures.py) pooled mean / last /
cls, with and without normalisation; text, ids, numpy ids and lists; argument errors; and the
model's sessions left alone."""

from __future__ import annotations

import math
from typing import Any, List

import pytest

import colibri
from conftest import FIXTURE

try:
    import numpy as np
except ImportError:  # the binding works without numpy; the oracle is read with it
    np = None

pytestmark = pytest.mark.skipif(np is None, reason="numpy is not installed")


def pooled_oracle(pooling: str, normalize: bool) -> List[float]:
    h = np.load(FIXTURE / "oracle" / "hidden_f32.npy").astype(np.float64)
    v = {"mean": h.mean(axis=0), "last": h[-1], "cls": h[0]}[pooling]
    return list(v / np.linalg.norm(v) if normalize else v)


def max_rel(got: Any, want: List[float]) -> float:
    scale = max(abs(x) for x in want)
    return max(abs(float(a) - b) for a, b in zip(got, want)) / scale


def test_embed_matches_transformers_for_every_pooling(model_path: Any, oracle: Any) -> None:
    ids = oracle["input_ids"]
    with colibri.Model(model_path) as m:
        assert m.info.hidden_size == 64
        for pooling in ("mean", "last", "cls"):
            for normalize in (True, False):
                v = m.embed(ids, pooling=pooling, normalize=normalize, quant_act="float")
                assert len(v) == 64
                assert max_rel(v, pooled_oracle(pooling, normalize)) <= 1e-4, (pooling, normalize)
                if normalize:
                    assert abs(math.sqrt(sum(float(x) ** 2 for x in v)) - 1.0) < 1e-5
        # numpy ids, a text, and a list of both.
        same = m.embed(np.array(ids, dtype=np.int64))
        assert list(same) == list(m.embed(ids))
        text = "Hello world"
        both = m.embed([text, ids])
        assert list(both[0]) == list(m.embed(m.tokenize(text))) and list(both[1]) == list(same)
        assert list(m.embed(text, add_special=False)) == list(m.embed(m.tokenize(text, add_special=False)))


def test_bad_arguments(model_path: Any) -> None:
    with colibri.Model(model_path) as m:
        with pytest.raises(ValueError):
            m.embed([1, 2], pooling="max")
        with pytest.raises(TypeError):
            m.embed([1, 2], normalize="yes")
        with pytest.raises(colibri.ColibriError) as e:
            m.embed([])
        assert e.value.status == colibri.Status.INVALID_ARGUMENT
        with pytest.raises(colibri.ColibriError) as e:
            m.embed([1, 10**6])
        assert e.value.status == colibri.Status.INVALID_ARGUMENT
        with pytest.raises(TypeError):
            m.embed([1, None])


def test_sessions_are_left_alone(model_path: Any, oracle: Any) -> None:
    ids = oracle["input_ids"]
    with colibri.Model(model_path) as m:
        s = m.session()
        s.infer(ids[:4])
        before = list(s.infer(ids[4:5]))
        s.truncate(4)
        m.embed(ids)
        assert s.position == 4
        assert list(s.infer(ids[4:5])) == before
