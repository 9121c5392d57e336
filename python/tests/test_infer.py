"""Session.infer / infer_embeddings against the transformers oracle, logits buffers, cache
control (reset / truncate / position), routing control and the routing trace."""

from __future__ import annotations

import array
import json
import os
import struct
from typing import Any, Dict, List, Tuple

import pytest

import colibri
from colibri import _buffers
from conftest import FIXTURE

try:
    import numpy as np
except ImportError:  # the binding works without numpy; most checks here use it
    np = None

needs_numpy = pytest.mark.skipif(np is None, reason="numpy is not installed")
ORACLE_NPY = FIXTURE / "oracle" / "logits_f32.npy"


@pytest.fixture(scope="module")
def oracle_logits() -> Any:
    if np is None:
        pytest.skip("numpy is not installed")
    return np.load(ORACLE_NPY)


def _read_npy_f32(path: Any) -> Tuple[Tuple[int, ...], "array.array[float]"]:
    """A little-endian float32 C-order .npy file without numpy: (shape, flat values)."""
    import ast

    raw = path.read_bytes()
    assert raw[:6] == b"\x93NUMPY"
    major = raw[6]
    (hlen,) = struct.unpack("<H" if major == 1 else "<I", raw[8:10] if major == 1 else raw[8:12])
    start = (10 if major == 1 else 12) + hlen
    header = ast.literal_eval(raw[(10 if major == 1 else 12):start].decode("latin1"))
    assert header["descr"] == "<f4" and not header["fortran_order"]
    values = array.array("f")
    values.frombytes(raw[start:])
    return tuple(header["shape"]), values


def test_logits_equal_the_oracle_without_numpy(
    model: colibri.Model, oracle: Dict[str, Any], monkeypatch: pytest.MonkeyPatch
) -> None:
    """The pure-Python path: logits as array.array("f"), compared with the .npy oracle."""
    shape, want = _read_npy_f32(ORACLE_NPY)
    assert shape == (16, 400)
    monkeypatch.setattr(_buffers, "np", None)
    with model.session(all_logits=True) as s:
        got = s.infer(oracle["input_ids"])
    assert isinstance(got, array.array) and got.typecode == "f" and len(got) == len(want)
    tol = 1e-4 * max(abs(v) for v in want)
    assert max(abs(a - b) for a, b in zip(got, want)) <= tol


def _close(got: Any, want: Any) -> None:
    tol = 1e-4 * float(np.abs(want).max())
    diff = float(np.abs(np.asarray(got, dtype=np.float64) - want).max())
    assert diff <= tol, f"max abs diff {diff} > {tol}"


def _embedding_table() -> Any:
    """model.embed_tokens.weight from the fixture's safetensors file (numpy only)."""
    raw = (FIXTURE / "model.safetensors").read_bytes()
    (n,) = struct.unpack("<Q", raw[:8])
    header = json.loads(raw[8 : 8 + n])
    t = header["model.embed_tokens.weight"]
    assert t["dtype"] == "F32"
    a, b = t["data_offsets"]
    return np.frombuffer(raw[8 + n + a : 8 + n + b], dtype="<f4").reshape(t["shape"])


@needs_numpy
def test_all_logits_equal_the_oracle(model: colibri.Model, oracle: Dict[str, Any], oracle_logits: Any) -> None:
    with model.session(all_logits=True) as s:
        got = s.infer(oracle["input_ids"])
        assert isinstance(got, np.ndarray) and got.dtype == np.float32
        assert got.shape == oracle_logits.shape == (16, 400)
        _close(got, oracle_logits)
        assert s.position == 16


@needs_numpy
def test_last_logits_token_by_token_equal_the_oracle(
    model: colibri.Model, oracle: Dict[str, Any], oracle_logits: Any
) -> None:
    with model.session() as s:
        for t, tok in enumerate(oracle["input_ids"]):
            got = s.infer([tok])
            assert got.shape == (400,)
            _close(got, oracle_logits[t])
            assert s.position == t + 1


@needs_numpy
def test_chunked_prefill_equals_the_oracle(model: colibri.Model, oracle: Dict[str, Any], oracle_logits: Any) -> None:
    ids = oracle["input_ids"]
    with model.session(all_logits=True) as s:
        a = s.infer(ids[:5])
        b = s.infer(np.array(ids[5:], dtype=np.int64))
        _close(np.concatenate([a, b]), oracle_logits)


@needs_numpy
@pytest.mark.parametrize("kv_type", ["f16", "bf16"])
def test_reduced_kv_types_stay_close(model: colibri.Model, oracle: Dict[str, Any], oracle_logits: Any,
                                     kv_type: str) -> None:
    with model.session(kv_type=kv_type, all_logits=True) as s:
        got = s.infer(oracle["input_ids"])
    assert float(np.abs(got - oracle_logits).max()) < 0.05 * float(np.abs(oracle_logits).max())


@needs_numpy
def test_infer_embeddings_equals_infer(model: colibri.Model, oracle: Dict[str, Any], oracle_logits: Any) -> None:
    emb = _embedding_table()[oracle["input_ids"]]
    with model.session(all_logits=True) as s:
        _close(s.infer_embeddings(emb), oracle_logits)
        s.reset()
        _close(s.infer_embeddings(emb.astype(np.float64)[:1]), oracle_logits[:1])  # converted to f32
        _close(s.infer_embeddings(emb[1]), oracle_logits[1:2])  # one 1-D row
        assert s.position == 2
    with model.session() as s, pytest.raises(ValueError, match="hidden_size"):
        s.infer_embeddings(np.zeros((2, 63), dtype=np.float32))
    with model.session() as s, pytest.raises(colibri.ColibriError) as e:
        s.infer_embeddings(np.full((1, 64), np.nan, dtype=np.float32))
    assert e.value.status == colibri.Status.INVALID_ARGUMENT


@needs_numpy
def test_logits_copy_view_and_out(model: colibri.Model, oracle: Dict[str, Any], oracle_logits: Any) -> None:
    ids = oracle["input_ids"]
    with model.session() as s:
        copied = s.infer(ids[:1])
        view = s.infer(ids[1:2], copy=False)
        snapshot = view.copy()
        view2 = s.infer(ids[2:3], copy=False)
        # The view shares the session's buffer: the next copy=False call overwrote it.
        assert np.shares_memory(view, view2)
        _close(view, oracle_logits[2])
        _close(snapshot, oracle_logits[1])
        _close(copied, oracle_logits[0])
        out = np.empty(400, dtype=np.float32)
        r = s.infer(ids[3:4], out=out)
        assert np.shares_memory(r, out)
        _close(out, oracle_logits[3])
        with pytest.raises(ValueError):
            s.infer(ids[4:5], out=np.empty(10, dtype=np.float32))
        with pytest.raises(ValueError):
            s.infer(ids[4:5], out=np.empty(400, dtype=np.float64))
        with pytest.raises(TypeError):
            s.infer(ids[4:5], out=[0.0] * 400)
        assert s.position == 4  # the rejected calls changed nothing
    with model.session(all_logits=True) as s:
        out = np.empty((16, 400), dtype=np.float32)
        r = s.infer(ids, out=out)
        assert r.shape == (16, 400)
        _close(out, oracle_logits)


@needs_numpy
def test_without_numpy_logits_are_array_of_float(
    model: colibri.Model, oracle: Dict[str, Any], oracle_logits: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(_buffers, "np", None)
    with model.session(all_logits=True) as s:
        got = s.infer(oracle["input_ids"][:3])
        assert isinstance(got, array.array) and got.typecode == "f" and len(got) == 3 * 400
        _close(np.array(got).reshape(3, 400), oracle_logits[:3])


@needs_numpy
def test_reset_truncate_position(model: colibri.Model, oracle: Dict[str, Any], oracle_logits: Any) -> None:
    ids = oracle["input_ids"]
    with model.session(n_ctx=32) as s:
        assert (s.position, s.n_ctx) == (0, 32)
        s.infer(ids[:10])
        assert s.position == 10
        s.truncate(4)
        assert s.position == 4
        _close(s.infer(ids[4:6]), oracle_logits[5])  # the kept prefix is reused
        with pytest.raises(colibri.ColibriError) as e:
            s.truncate(7)
        assert e.value.status == colibri.Status.INVALID_ARGUMENT
        s.reset()
        assert s.position == 0
        _close(s.infer(ids[:1]), oracle_logits[0])


def test_context_full(model: colibri.Model) -> None:
    with model.session(n_ctx=8) as s:
        s.infer(list(range(6)))
        with pytest.raises(colibri.ColibriError) as e:
            s.infer([1, 2, 3])
        assert e.value.status == colibri.Status.CONTEXT_FULL
        assert "context" in e.value.message
        assert s.position == 6  # a failed call leaves the cache as it was
        s.infer([1, 2])
        assert s.position == 8


def _trace(s: colibri.Session, ids: List[int]) -> List[Tuple[int, int, List[int], List[float]]]:
    recs: List[Tuple[int, int, List[int], List[float]]] = []
    s.on_route(lambda layer, pos, experts, weights: recs.append((layer, pos, experts, weights)))
    s.infer(ids)
    return recs


def test_routing_trace_equals_the_oracle(model: colibri.Model, oracle: Dict[str, Any]) -> None:
    ids = oracle["input_ids"]
    with model.session() as s:
        recs = _trace(s, ids)
    assert len(recs) == len(ids) * len(oracle["moe_layers"])
    for layer, pos, experts, weights in recs:
        assert layer in oracle["moe_layers"]
        assert experts == oracle["routing_f32"][layer][pos]
        assert weights == pytest.approx(oracle["routing_weights_f32"][layer][pos], abs=1e-5)


def test_routing_trace_stop_remove_and_exceptions(model: colibri.Model) -> None:
    with model.session() as s:
        seen: List[int] = []

        def stop_after_three(layer: int, pos: int, experts: List[int], weights: List[float]) -> bool:
            seen.append(pos)
            return len(seen) == 3

        s.on_route(stop_after_three)
        s.infer([1, 2, 3, 4])
        assert len(seen) == 3

        class Boom(Exception):
            pass

        def boom(*_: Any) -> None:
            raise Boom("from the route callback")

        s.on_route(boom)
        with pytest.raises(Boom):
            s.infer([5])
        assert s.position == 4  # the call failed, and was undone
        s.on_route(None)
        s.infer([6])  # no callback, no error
        with pytest.raises(TypeError):
            s.on_route(42)  # type: ignore[arg-type]


def test_moe_top_k_and_gumbel_routing(model: colibri.Model, oracle: Dict[str, Any]) -> None:
    ids = oracle["input_ids"][:6]
    with model.session(moe_top_k=2) as s:
        recs = _trace(s, ids)
    assert all(len(e) == 2 for _, _, e, _ in recs)
    with model.session() as s:
        s.set_routing("topk", moe_top_k=1)
        assert all(len(e) == 1 for _, _, e, _ in _trace(s, ids))
        with pytest.raises(colibri.ColibriError) as e:
            s.set_routing("topk", moe_top_k=9)  # more than n_experts
        assert e.value.status == colibri.Status.INVALID_ARGUMENT
        with pytest.raises(ValueError):
            s.set_routing("random")
    runs = []
    for seed in (1, 1, 2):
        with model.session(routing="gumbel", routing_seed=seed) as s:
            runs.append([e for _, _, e, _ in _trace(s, ids)])
    assert runs[0] == runs[1]  # same seed, same choices
    assert runs[0] != runs[2]
    with model.session() as s:
        s.set_routing("gumbel", routing_seed=1)
        assert [e for _, _, e, _ in _trace(s, ids)] == runs[0]


def test_routing_seed_keeps_its_old_name_for_now(model: colibri.Model, oracle: Dict[str, Any]) -> None:
    """ABI 1 calls the session's routing seed routing_seed; `seed=` still works, with a warning."""
    ids = oracle["input_ids"][:6]
    with model.session(routing="gumbel", routing_seed=3) as s:
        want = [e for _, _, e, _ in _trace(s, ids)]
    with pytest.warns(DeprecationWarning, match="routing_seed"):
        s = model.session(routing="gumbel", seed=3)
    with s:
        assert [e for _, _, e, _ in _trace(s, ids)] == want
        s.reset()
        with pytest.warns(DeprecationWarning, match="routing_seed"):
            s.set_routing("gumbel", seed=3)
        assert [e for _, _, e, _ in _trace(s, ids)] == want
    with pytest.raises(TypeError, match="routing_seed"):
        model.session(routing_seed=1, seed=2)


def test_thread_count_changes_no_result(model_path: Any) -> None:
    ids = [i % 390 for i in range(5, 45)]
    got = []
    for n in (1, 3):
        with colibri.Model(model_path, n_threads=n) as m, m.session() as s:
            got.append([float(v) for v in s.infer(ids)])
    assert got[0] == got[1]
    for bad in (-1, 1025):
        with pytest.raises(ValueError):
            colibri.Model(model_path, n_threads=bad)


def _vm_flags(path: Any) -> Dict[str, List[str]]:
    """The VmFlags of this process's mappings of ``path``, by address range."""
    name, mapping = os.path.realpath(path), ""
    out: Dict[str, List[str]] = {}
    with open("/proc/self/smaps") as f:
        for line in f:
            parts = line.split()
            if parts and "-" in parts[0] and not parts[0].endswith(":"):
                mapping = parts[0] if len(parts) > 5 and parts[5] == name else ""
            elif mapping and parts and parts[0] == "VmFlags:":
                out[mapping] = parts[1:]
    return out


def test_huge_page_advice_is_on_by_default_and_can_be_turned_off(model_path: Any) -> None:
    ids = [i % 390 for i in range(5, 21)]
    got = []
    for huge in (True, False):
        before = _vm_flags(model_path)
        with colibri.Model(model_path, hugepages=huge) as m, m.session() as s:
            (flags,) = [f for r, f in _vm_flags(model_path).items() if r not in before]
            assert ("hg" in flags) == huge, flags
            got.append([float(v) for v in s.infer(ids)])
    assert got[0] == got[1]
    with pytest.raises(TypeError):
        colibri.Model(model_path, hugepages="yes")  # type: ignore[arg-type]


@pytest.mark.parametrize("routing", ["topk", "gumbel"])
def test_an_exception_in_on_route_undoes_the_call(model: colibri.Model, routing: str) -> None:
    class Boom(Exception):
        pass

    def boom(*_: Any) -> None:
        raise Boom("from the route callback")

    with model.session(routing=routing, routing_seed=3) as clean, model.session(routing=routing, routing_seed=3) as s:
        clean.infer([7, 8])
        want = list(clean.infer([1, 2, 3]))
        want_next = list(clean.infer([4]))
        view = s.infer([7, 8], copy=False)  # the session's reused buffer
        kept = list(view)
        s.on_route(boom)
        for _ in range(2):
            with pytest.raises(Boom):
                s.infer([1, 2, 3], copy=False)
            assert s.position == 2, "a failed call changed the cache"
            assert list(view) == kept, "a failed call wrote logits"
        with pytest.raises(Boom):
            s.complete([1, 2, 3], max_tokens=2, temperature=0)
        assert s.position == 2
        s.on_route(None)
        assert list(s.infer([1, 2, 3])) == want, "the retry differs from one clean call"
        assert list(s.infer([4])) == want_next, "the routing RNG was not restored"
