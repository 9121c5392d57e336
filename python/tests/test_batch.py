"""Model.infer_batch (colibri_infer_batch): several sessions stepped together give what separate
Session.infer calls give (same greedy tokens, logits within a tolerance), each with its own
options; bad input raises the library's status and leaves every session unchanged."""

from __future__ import annotations

import array
from typing import Any, Dict, List

import pytest

import colibri
from colibri import _buffers
from colibri._lib import Status

try:
    import numpy as np
except ImportError:  # the binding works without numpy
    np = None


def _argmax(row: Any) -> int:
    row = list(row)
    return max(range(len(row)), key=lambda j: (row[j], -j))


def _max_diff(a: Any, b: Any) -> float:
    return max(abs(x - y) for x, y in zip(list(a), list(b)))


def _flat(x: Any) -> List[float]:
    return [float(v) for v in (x.reshape(-1) if hasattr(x, "reshape") else x)]


def _prompts(oracle: Dict[str, Any]) -> List[List[int]]:
    ids = oracle["input_ids"]
    return [ids[:3], ids[3:8], ids[5:14]]


def _run(model: colibri.Model, oracle: Dict[str, Any], **session_kw: Any) -> None:
    """Prefill three prompts in one batch, then 8 greedy steps; the twins run separately."""
    batched = [model.session(**session_kw) for _ in range(3)]
    twins = [model.session(**session_kw) for _ in range(3)]
    feed = _prompts(oracle)
    try:
        for _ in range(9):
            want = [t.infer(f) for t, f in zip(twins, feed)]
            got = model.infer_batch(batched, feed)
            assert len(got) == 3
            for g, w in zip(got, want):
                g, w = _flat(g), _flat(w)
                assert len(g) == len(w) == 400
                # Bit-identical with today's kernels; a tolerance for kernels whose rounding
                # depends on the number of rows.
                assert _max_diff(g, w) <= 1e-5 * max(abs(v) for v in w)
            assert [b.position for b in batched] == [t.position for t in twins]
            feed = [[_argmax(_flat(w))] for w in want]
            assert feed == [[_argmax(_flat(g))] for g in got], "greedy tokens"
    finally:
        for s in batched + twins:
            s.close()


def test_batched_greedy_equals_separate_calls(model: colibri.Model, oracle: Dict[str, Any]) -> None:
    _run(model, oracle)


def test_batched_gumbel_routing_stays_per_session(model: colibri.Model, oracle: Dict[str, Any]) -> None:
    _run(model, oracle, routing="gumbel", routing_seed=5, moe_top_k=1)


def test_batch_without_numpy(model: colibri.Model, oracle: Dict[str, Any], monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(_buffers, "np", None)
    with model.session() as a, model.session() as b:
        got = model.infer_batch([a, b], _prompts(oracle)[:2])
        assert all(isinstance(g, array.array) and len(g) == 400 for g in got)


@pytest.mark.skipif(np is None, reason="numpy is not installed")
def test_options_and_shapes_are_per_session(model: colibri.Model, oracle: Dict[str, Any]) -> None:
    p = _prompts(oracle)
    with model.session(all_logits=True) as a, model.session() as b, model.session(all_logits=True) as ta:
        got = model.infer_batch([a, b], [p[1], p[0]])
        assert got[0].shape == (5, 400) and got[1].shape == (400,)
        assert float(np.abs(got[0] - ta.infer(p[1])).max()) <= 1e-5 * float(np.abs(got[0]).max())
        # A route callback per session fires after the step, with that session's records.
        seen: List[int] = []
        b.on_route(lambda layer, pos, experts, weights: seen.append(pos))
        model.infer_batch([a, b], [[1], [2, 3]])
        assert sorted(set(seen)) == [3, 4] and len(seen) == 4  # 2 tokens x 2 MoE layers
        # An exception in a route callback is re-raised by the batch call, which is undone for
        # every session.
        b.on_route(lambda *r: 1 / 0)
        with pytest.raises(ZeroDivisionError):
            model.infer_batch([a, b], [[1], [2]])
        assert (a.position, b.position) == (6, 5)


def test_bad_input_raises_the_status_and_changes_nothing(model: colibri.Model, model_path: Any) -> None:
    small = model.session(n_ctx=4)
    a, b = model.session(), model.session()
    other_model = colibri.Model(model_path)
    foreign = other_model.session()
    closed = model.session()
    closed.close()
    try:
        model.infer_batch([a, b, small], [[1, 2], [3], [4, 5, 6]])
        before = [s.position for s in (a, b, small)]
        cases = [
            ("empty token list", [a, b], [[1], []], Status.INVALID_ARGUMENT, "n_tokens[1] is 0"),
            ("another model", [a, foreign], [[1], [2]], Status.INVALID_ARGUMENT, "another model"),
            ("context full", [a, b, small], [[1], [2], [3, 4]], Status.CONTEXT_FULL, "sequence 2"),
            ("id outside the vocabulary", [a, b], [[1], [400]], Status.INVALID_ARGUMENT, "vocabulary"),
            ("no sessions", [], [], Status.INVALID_ARGUMENT, "n_sessions is 0"),
            ("repeated session", [a, b, a], [[1], [2], [3]], Status.INVALID_ARGUMENT, "same session"),
            ("closed session", [a, closed], [[1], [2]], Status.NULL_ARGUMENT, "closed"),
        ]
        for what, sessions, tokens, status, needle in cases:
            with pytest.raises(colibri.ColibriError) as e:
                model.infer_batch(sessions, tokens)
            assert e.value.status == status, what
            assert needle in e.value.message, (what, e.value.message)
            assert [s.position for s in (a, b, small)] == before, what
            a.reset()  # every session is free again after a failure (not left busy)
            a.infer([1, 2])
        with pytest.raises(ValueError):
            model.infer_batch([a, b], [[1]])
        with pytest.raises(TypeError):
            model.infer_batch([a, None], [[1], [2]])  # type: ignore[list-item]
        with pytest.raises(TypeError):
            model.infer_batch([a], ["text"])
    finally:
        for s in (small, a, b, foreign):
            s.close()
        other_model.close()
