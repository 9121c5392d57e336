"""The quant_act session option (``colibri_session_params.quant_act``): how quantised weights meet
their activations. Every COLIBRI_QUANT_ACT_* name is accepted and reaches the library (on a q8
model, reduced (int8) and float activations give different logits, float the closer to the unquantised
model's); anything else is refused, in Python before C and by the library itself."""

from __future__ import annotations

import ctypes
import os
import subprocess
from pathlib import Path
from typing import Any, Dict, Iterator, List

import pytest

import colibri
from conftest import FIXTURE


@pytest.fixture(scope="module")
def q8_model(tmp_path_factory: pytest.TempPathFactory, cli: Path) -> Iterator[colibri.Model]:
    """The fixture with every matrix block-quantised to 8 bits."""
    out = tmp_path_factory.mktemp("q8") / "qwen2_moe_shared_q8.colibri"
    subprocess.run([str(cli), "convert", str(FIXTURE), "-o", str(out), "--quantize", "q8"],
                   check=True, capture_output=True)
    with colibri.Model(out) as m:
        yield m


@pytest.fixture(scope="module")
def bf16_model(tmp_path_factory: pytest.TempPathFactory, cli: Path) -> Iterator[colibri.Model]:
    """The fixture stored in bf16."""
    out = tmp_path_factory.mktemp("bf16") / "qwen2_moe_shared_bf16.colibri"
    subprocess.run([str(cli), "convert", str(FIXTURE), "-o", str(out), "--dtype", "bf16"],
                   check=True, capture_output=True)
    with colibri.Model(out) as m:
        yield m


def _logits(model: colibri.Model, ids: List[int], **kw: Any) -> List[float]:
    with model.session(**kw) as s:
        return [float(v) for v in s.infer(ids)]


def _dist(a: List[float], b: List[float]) -> float:
    return max(abs(x - y) for x, y in zip(a, b))


def test_every_name_is_accepted(model: colibri.Model) -> None:
    for name in ["default", "reduced", "float", "REDUCED", "Float"]:
        with model.session(quant_act=name) as s:
            assert s.quant_act == name.lower()
            assert len(s.generate_ids("Hello", max_tokens=3, temperature=0, ignore_eos=True)) == 3
    with model.session() as s:
        assert s.quant_act == "default"


def test_the_option_reaches_the_library(q8_model: colibri.Model, model: colibri.Model, oracle: Dict[str, Any]) -> None:
    ids = oracle["input_ids"][:8]
    int8 = _logits(q8_model, ids, quant_act="reduced")
    flt = _logits(q8_model, ids, quant_act="float")
    ref = _logits(model, ids)  # the unquantised weights
    assert int8 != flt
    assert _dist(flt, ref) < _dist(int8, ref)
    assert _logits(q8_model, ids, quant_act="reduced") == int8  # deterministic
    if os.environ.get("COLIBRI_QUANT_ACT", "").strip() not in ("float", "f32"):
        assert _logits(q8_model, ids, quant_act="default") == int8  # the process default: reduced


def test_bf16_weights_meet_bf16_activations_in_reduced_mode(bf16_model: colibri.Model) -> None:
    ids = [1, 5, 9, 200, 17, 3]
    reduced = _logits(bf16_model, ids, quant_act="reduced")
    flt = _logits(bf16_model, ids, quant_act="float")
    assert reduced != flt  # the activations were rounded
    scale = max(abs(v) for v in flt)
    assert _dist(reduced, flt) < 2e-2 * scale  # ... to bf16, not to anything coarser


def test_bad_values_are_refused_before_c(model: colibri.Model) -> None:
    for bad in ["int4", "", "f32 "]:
        with pytest.raises(ValueError, match="quant_act"):
            model.session(quant_act=bad)
    for wrong in [1, None, b"int8"]:
        with pytest.raises(TypeError, match="quant_act"):
            model.session(quant_act=wrong)  # type: ignore[arg-type]


def test_the_library_refuses_an_unknown_value(model: colibri.Model) -> None:
    lib = model.lib
    p = lib.session_params()
    p.quant_act = max(colibri.QUANT_ACTS.values()) + 1
    h = ctypes.c_void_p()
    with model._shared() as mh:
        st = lib.colibri_session_new(mh, ctypes.byref(p), ctypes.byref(h))
        err = lib.error(st)
    assert err.status == colibri.Status.INVALID_ARGUMENT and "quant_act" in err.message
    assert not h.value
