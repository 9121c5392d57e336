"""MoeLayer (colibri_moe_*): the standalone MoE layer against a pure-Python computation."""

from __future__ import annotations

import math
import random
from typing import List

import pytest

import colibri


def _matvec(w: List[List[float]], x: List[float]) -> List[float]:
    return [sum(a * b for a, b in zip(row, x)) for row in w]


def _reference(experts: List[List[List[float]]], top_k: int, x: List[float], gates: List[float]) -> List[float]:
    order = sorted(range(len(gates)), key=lambda e: (-gates[e], e))[:top_k]
    m = max(gates[e] for e in order)
    ex = [math.exp(gates[e] - m) for e in order]
    out = [0.0] * max(len(w) for w in experts)
    for e, p in zip(order, ex):
        for i, v in enumerate(_matvec(experts[e], x)):
            out[i] += p / sum(ex) * v
    return out


def test_moe_layer_matches_the_reference() -> None:
    rng = random.Random(5)
    hidden = 12
    sizes = [5, 7, 3, 7]
    experts = [[[rng.uniform(-1, 1) for _ in range(hidden)] for _ in range(r)] for r in sizes]
    with colibri.MoeLayer(experts, top_k=2) as layer:
        assert (layer.n_experts, layer.hidden_size, layer.output_size) == (4, hidden, 7)
        for _ in range(5):
            x = [rng.uniform(-1, 1) for _ in range(hidden)]
            gates = [rng.uniform(-2, 2) for _ in range(4)]
            got = list(layer.infer(x, gates))
            assert got == pytest.approx(_reference(experts, 2, x, gates), abs=1e-5)
    assert layer.closed


def test_moe_layer_errors() -> None:
    with pytest.raises(colibri.ColibriError) as e:
        colibri.MoeLayer([[[1.0, 2.0]]], top_k=2)  # top_k > n_experts
    assert e.value.status == colibri.Status.INVALID_ARGUMENT
    with pytest.raises(ValueError):
        colibri.MoeLayer([[[1.0, 2.0]], [[1.0, 2.0, 3.0]]], top_k=1)  # different widths
    with pytest.raises(TypeError):
        colibri.MoeLayer("experts", top_k=1)  # type: ignore[arg-type]
    layer = colibri.MoeLayer([[[1.0, 0.0]], [[0.0, 1.0]]], top_k=1)
    assert list(layer.infer([3.0, 4.0], [0.0, 1.0])) == [4.0]
    with pytest.raises(colibri.ColibriError) as e:
        layer.infer([1.0, 1.0], [float("nan"), 0.0])
    assert e.value.status == colibri.Status.INVALID_ARGUMENT
    with pytest.raises(ValueError):
        layer.infer([1.0], [0.0, 1.0])
    layer.close()
    layer.close()
    with pytest.raises(colibri.ColibriError):
        layer.infer([1.0, 1.0], [0.0, 1.0])


def _bound(storage: str, w: List[float], x: List[float]) -> float:
    """The error bound include/colibri.h states for one expert row (before the mixing weight)."""
    if storage == "bf16":
        return sum(abs(a * b) / 128 + abs(a) * 2.0**-126 for a, b in zip(w, x))
    total = 0.0
    for i in range(0, len(w), 32):
        wb, xb = w[i : i + 32], x[i : i + 32]
        l1w, l1x = sum(map(abs, wb)), sum(map(abs, xb))
        total += (max(map(abs, wb)) / 200 + 2.0**-24) * l1x + max(map(abs, xb)) * (l1w / 100 + 2.0**-24)
    return total


def test_reduced_storage_stays_within_its_bound() -> None:
    rng = random.Random(9)
    hidden = 64
    experts = [[[rng.uniform(-1, 1) for _ in range(hidden)] for _ in range(16)] for _ in range(3)]
    x = [rng.uniform(-2, 2) for _ in range(hidden)]
    gates = [0.5, 1.5, -0.5]
    want = _reference(experts, 2, x, gates)
    for storage in ["bf16", "q8", "Q8"]:
        layer = colibri.MoeLayer(experts, 2, storage=storage)
        assert layer.storage == storage.lower()
        got = list(layer.infer(x, gates))
        assert got != want  # the weights were stored rounded
        for r, (g, w) in enumerate(zip(got, want)):
            # Both chosen experts' bounds with mixing weights ≤ 1: a bound on the mix.
            bound = sum(_bound(storage.lower(), experts[e][r], x) for e in (0, 1))
            assert abs(g - w) <= bound, (storage, r, g, w)
        layer.close()


def test_storage_names_are_checked() -> None:
    with pytest.raises(ValueError, match="storage"):
        colibri.MoeLayer([[[1.0] * 32]], 1, storage="int4")
    with pytest.raises(TypeError, match="storage"):
        colibri.MoeLayer([[[1.0] * 32]], 1, storage=2)  # type: ignore[arg-type]
    with pytest.raises(colibri.ColibriError, match="multiple of 32"):
        colibri.MoeLayer([[[1.0] * 33]], 1, storage="q8")


def test_thread_count_changes_no_result() -> None:
    rng = random.Random(9)
    hidden = 64
    experts = [[[rng.uniform(-1, 1) for _ in range(hidden)] for _ in range(200)] for _ in range(3)]
    x = [rng.uniform(-1, 1) for _ in range(hidden)]
    gates = [0.5, -1.0, 2.0]
    got = []
    for n in (1, 3):
        with colibri.MoeLayer(experts, top_k=2, n_threads=n) as layer:
            got.append(list(layer.infer(x, gates)))
    assert got[0] == got[1]
    with pytest.raises(ValueError):
        colibri.MoeLayer(experts, top_k=2, n_threads=1025)
