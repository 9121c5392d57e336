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
