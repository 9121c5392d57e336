"""Errors: library statuses with their messages, closed objects, and wrong Python types that
must be rejected before anything reaches C."""

from __future__ import annotations

import threading
from pathlib import Path
from typing import Any, Callable, Dict, List

import pytest

import colibri


def test_bad_path_is_io_with_a_message(tmp_path: Path) -> None:
    missing = tmp_path / "no-such-model.colibri"
    with pytest.raises(colibri.ColibriError) as e:
        colibri.Model(missing)
    err = e.value
    assert err.status == colibri.Status.IO == 3
    assert err.status_name == "IO"
    assert err.message and "No such file" in err.message
    # (libcolibri 0.1 does not name the path in this message; it would help.)
    assert str(err).startswith("IO: ")
    assert isinstance(err, Exception) and err.args == (3, err.message)


def test_directory_and_garbage_files(tmp_path: Path) -> None:
    with pytest.raises(colibri.ColibriError) as e:
        colibri.Model(tmp_path)
    assert e.value.status == colibri.Status.IO
    junk = tmp_path / "junk.colibri"
    junk.write_bytes(b"\x00" * 4096)
    with pytest.raises(colibri.ColibriError) as e:
        colibri.Model(junk)
    assert e.value.status == colibri.Status.INVALID_MODEL and e.value.message


def test_truncated_model_file(tmp_path: Path, model_path: Path) -> None:
    cut = tmp_path / "cut.colibri"
    cut.write_bytes(model_path.read_bytes()[:100_000])
    with pytest.raises(colibri.ColibriError) as e:
        colibri.Model(cut)
    assert e.value.status == colibri.Status.INVALID_MODEL


@pytest.mark.parametrize("bad", [400, 10**6, -1, -(2**31)])
def test_bad_token_id_is_invalid_argument(model: colibri.Model, bad: int) -> None:
    with model.session() as s:
        with pytest.raises(colibri.ColibriError) as e:
            s.infer([1, bad])
        assert e.value.status == colibri.Status.INVALID_ARGUMENT
        assert str(bad) in e.value.message
        assert s.position == 0  # nothing was fed
        with pytest.raises(colibri.ColibriError) as e:
            s.generate_ids([bad], max_tokens=2)
        assert e.value.status == colibri.Status.INVALID_ARGUMENT
    with pytest.raises(colibri.ColibriError) as e:
        model.detokenize([5, bad])
    assert e.value.status == colibri.Status.INVALID_ARGUMENT and e.value.message


@pytest.mark.parametrize(
    "kw",
    [dict(temperature=-1.0), dict(top_p=0.0), dict(top_p=1.5), dict(min_p=2.0), dict(repetition_penalty=0.0),
     dict(temperature=float("nan"))],
)
def test_bad_sampler_values_are_invalid_argument(session: colibri.Session, kw: Dict[str, Any]) -> None:
    with pytest.raises(colibri.ColibriError) as e:
        session.complete([1, 2], max_tokens=3, **kw)
    assert e.value.status == colibri.Status.INVALID_ARGUMENT
    assert next(iter(kw)) in e.value.message


def test_bad_session_options(model: colibri.Model) -> None:
    with pytest.raises(colibri.ColibriError) as e:
        model.session(moe_top_k=9)  # more than the 8 experts
    assert e.value.status == colibri.Status.INVALID_ARGUMENT


def test_error_messages_are_per_thread(model: colibri.Model, tmp_path: Path) -> None:
    """Each thread reads its own last error, right after its own failing call."""
    results: Dict[str, List[str]] = {"io": [], "tok": []}
    barrier = threading.Barrier(2)

    def bad_path() -> None:
        barrier.wait()
        for _ in range(50):
            try:
                colibri.Model(tmp_path / "missing.colibri")
            except colibri.ColibriError as e:
                if not (e.status == colibri.Status.IO and "No such file" in e.message):
                    results["io"].append(repr(e))

    def bad_token() -> None:
        barrier.wait()
        for _ in range(50):
            try:
                model.detokenize([123456])
            except colibri.ColibriError as e:
                if not (e.status == colibri.Status.INVALID_ARGUMENT and "123456" in e.message):
                    results["tok"].append(repr(e))

    ts = [threading.Thread(target=bad_path), threading.Thread(target=bad_token)]
    for t in ts:
        t.start()
    for t in ts:
        t.join()
    assert results == {"io": [], "tok": []}


def test_closed_session_raises(model: colibri.Model) -> None:
    s = model.session()
    s.close()
    s.close()  # idempotent
    uses: List[Callable[[], Any]] = [
        lambda: s.infer([1]),
        lambda: s.infer_embeddings([[0.0] * 64]),
        lambda: s.generate_ids([1], max_tokens=1),
        lambda: s.complete([1], max_tokens=1),
        lambda: s.generate([1], max_tokens=1),
        lambda: s.reset(),
        lambda: s.truncate(0),
        lambda: s.position,
        lambda: s.n_ctx,
        lambda: s.set_routing("topk"),
        lambda: s.on_route(None),
    ]
    for use in uses:
        with pytest.raises(colibri.ColibriError) as e:
            use()
        assert e.value.status == colibri.Status.NULL_ARGUMENT and "closed" in e.value.message
    assert "closed" in repr(s)
    s.__del__()  # a finaliser after close is a no-op


def test_session_context_manager(model: colibri.Model) -> None:
    with model.session() as s:
        s.infer([1])
    assert s.closed
    with pytest.raises(colibri.ColibriError):
        s.infer([1])


def test_model_wrong_types(model_path: Path) -> None:
    with pytest.raises(TypeError):
        colibri.Model(None)  # type: ignore[arg-type]
    with pytest.raises(TypeError):
        colibri.Model(123)  # type: ignore[arg-type]
    with pytest.raises(ValueError):
        colibri.Model("model\0.colibri")
    with pytest.raises(TypeError):
        colibri.Model(model_path, mmap="yes")  # type: ignore[arg-type]
    with pytest.raises(TypeError):
        colibri.Session(object())  # type: ignore[arg-type]


def test_text_wrong_types(model: colibri.Model) -> None:
    for bad in (None, 123, b"bytes", ["a"]):
        with pytest.raises(TypeError):
            model.tokenize(bad)  # type: ignore[arg-type]
    with pytest.raises(ValueError):
        model.tokenize("lone surrogate \ud800")
    with pytest.raises(TypeError):
        model.tokenize("x", add_special="no")  # type: ignore[arg-type]
    for bad_ids in ("abc", None, 5, [1.5], [1, "2"], [None]):
        with pytest.raises(TypeError):
            model.detokenize(bad_ids)  # type: ignore[arg-type]
    with pytest.raises(ValueError):
        model.detokenize([2**40])


def test_session_wrong_types(model: colibri.Model) -> None:
    bad_options: List[Dict[str, Any]] = [
        dict(n_ctx=-1), dict(n_ctx=2**33), dict(kv_type="f8"), dict(routing="random"),
        dict(routing_seed=-1), dict(moe_top_k=-1), dict(quant_act="int4"), dict(quant_act=""),
    ]
    for kw in bad_options:
        with pytest.raises(ValueError):
            model.session(**kw)
    for kw in [dict(n_ctx="4"), dict(kv_type=1), dict(all_logits="yes"), dict(routing_seed=1.5), dict(n_ctx=None),
               dict(quant_act=1), dict(quant_act=None)]:
        with pytest.raises(TypeError):
            model.session(**kw)
    with model.session() as s:
        for bad in ("abc", None, 3, [1.5], b"\x01\x02", [[1, 2]]):
            with pytest.raises(TypeError):
                s.infer(bad)  # type: ignore[arg-type]
        with pytest.raises(ValueError):
            s.infer([])
        with pytest.raises(ValueError):
            s.infer([2**31])
        with pytest.raises(TypeError):
            s.infer([1], copy="no")  # type: ignore[arg-type]
        with pytest.raises(ValueError):
            s.truncate(-1)
        with pytest.raises(TypeError):
            s.truncate("1")  # type: ignore[arg-type]
        with pytest.raises(TypeError):
            s.infer_embeddings("abc")
        with pytest.raises(TypeError):
            s.infer_embeddings([["a"] * 64])
        with pytest.raises(ValueError):
            s.infer_embeddings([])
        with pytest.raises(ValueError):
            s.infer_embeddings([[0.0] * 63])
        with pytest.raises(TypeError):
            s.set_routing(1)  # type: ignore[arg-type]
        assert s.position == 0  # nothing reached the library


def test_numpy_wrong_types(model: colibri.Model) -> None:
    np = pytest.importorskip("numpy")
    with model.session() as s:
        with pytest.raises(TypeError):
            s.infer(np.array([1.0, 2.0]))
        with pytest.raises(TypeError):
            s.infer(np.array([True, False]))
        with pytest.raises(ValueError):
            s.infer(np.zeros((2, 2), dtype=np.int32))
        with pytest.raises(ValueError):
            s.infer(np.array([2**40], dtype=np.int64))
        with pytest.raises(TypeError):
            s.infer_embeddings(np.array([["a"] * 64]))
        with pytest.raises(ValueError):
            s.infer_embeddings(np.zeros((0, 64), dtype=np.float32))
        with pytest.raises(ValueError):
            s.infer_embeddings(np.zeros((2, 2, 64), dtype=np.float32))
        assert s.position == 0


@pytest.mark.parametrize(
    "kw, exc",
    [
        (dict(max_tokens="5"), TypeError),
        (dict(max_tokens=5.0), TypeError),
        (dict(max_tokens=-1), ValueError),
        (dict(max_tokens=2**40), ValueError),
        (dict(temperature="hot"), TypeError),
        (dict(temperature=None, top_p="1"), TypeError),
        (dict(top_k=1.5), TypeError),
        (dict(seed=-1), ValueError),
        (dict(seed=2**64), ValueError),
        (dict(ignore_eos="yes"), TypeError),
        (dict(callback=5), TypeError),
        (dict(add_special=None), TypeError),
        (dict(stop=5), TypeError),
        (dict(stop=b"\n"), TypeError),
        (dict(stop=["ok", 1]), TypeError),
        (dict(stop=["a\0b"]), ValueError),
        (dict(stop="lone surrogate \ud800"), ValueError),
    ],
)
def test_generate_wrong_types(session: colibri.Session, kw: Dict[str, Any], exc: type) -> None:
    with pytest.raises(exc):
        session.complete("Hello", **kw)
    if "callback" not in kw:
        with pytest.raises(exc):
            session.generate("Hello", **kw)  # checked at the call, before iteration
        with pytest.raises(exc):
            session.generate_ids("Hello", **kw)
    assert session.position == 0


def test_generate_wrong_prompts(session: colibri.Session) -> None:
    for bad in (3.5, None, [1.5], b"bytes"):
        with pytest.raises(TypeError):
            session.generate_ids(bad, max_tokens=1)  # type: ignore[arg-type]
    with pytest.raises(ValueError):
        session.generate_ids([], max_tokens=1)
    with pytest.raises(ValueError):
        session.generate_ids("", max_tokens=1)  # encodes to no tokens
