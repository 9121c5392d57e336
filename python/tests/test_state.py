"""Session.save_state / load_state: a restored session continues exactly like the one that
saved it, the stored ids come back, and a damaged or foreign file raises without changing the
session. Session.copy_from: an in-memory copy continues exactly like its source, which the
copy's calls leave alone; a context too small raises without changing the destination."""

from __future__ import annotations

from pathlib import Path

import pytest

import colibri


def _logits(s: colibri.Session, ids: list) -> list:
    return list(s.infer(ids))


def test_restored_session_continues_identically(model: colibri.Model, tmp_path: Path) -> None:
    prompt = model.tokenize("The quick brown fox jumps over the lazy dog")
    a = model.session(n_ctx=128)
    a.infer(prompt)
    path = tmp_path / "a.state"
    a.save_state(path, prompt)
    b = model.session(n_ctx=128)
    assert b.load_state(path) == prompt
    assert b.position == len(prompt)
    assert _logits(a, [5, 6]) == _logits(b, [5, 6])
    a.save_state(str(path))  # without ids, str path
    c = model.session(n_ctx=128)
    assert c.load_state(path) == []
    assert _logits(a, [7]) == _logits(c, [7])


def test_bad_files_raise_and_change_nothing(model: colibri.Model, tmp_path: Path) -> None:
    a = model.session(n_ctx=128)
    a.infer(model.tokenize("Hello world"))
    good = tmp_path / "good.state"
    a.save_state(good)
    raw = good.read_bytes()
    victim = model.session(n_ctx=128)
    victim.infer([1, 2, 3])
    before = victim.position
    bad = tmp_path / "bad.state"
    for what, data in [
        ("truncated", raw[: len(raw) // 2]),
        ("flipped", raw[:150] + bytes([raw[150] ^ 1]) + raw[151:]),
        ("garbage", b"not a state file at all" * 10),
    ]:
        bad.write_bytes(data)
        with pytest.raises(colibri.ColibriError) as e:
            victim.load_state(bad)
        assert e.value.status == colibri.Status.INVALID_ARGUMENT, what
        assert victim.position == before, what
    with pytest.raises(colibri.ColibriError):
        victim.load_state(tmp_path / "missing.state")
    small = model.session(n_ctx=2)
    with pytest.raises(colibri.ColibriError) as e:
        small.load_state(good)
    assert e.value.status == colibri.Status.CONTEXT_FULL
    with pytest.raises(colibri.ColibriError):
        a.save_state(good, [1, 2])  # ids must cover every cached token
    assert good.read_bytes() == raw


def test_copied_session_continues_identically(model: colibri.Model) -> None:
    prompt = model.tokenize("The quick brown fox jumps over the lazy dog")
    a = model.session(n_ctx=128)
    a.infer(prompt)
    b = model.session(n_ctx=64)
    b.infer([1, 2, 3])
    b.copy_from(a)
    b.copy_from(b)
    assert (b.position, b.n_ctx) == (len(prompt), 64)
    assert _logits(b, [5, 6]) == _logits(a, [5, 6])
    assert a.position == len(prompt) + 2
    small = model.session(n_ctx=2)
    with pytest.raises(colibri.ColibriError) as e:
        small.copy_from(a)
    assert e.value.status == colibri.Status.CONTEXT_FULL
    assert small.position == 0
    with pytest.raises(TypeError):
        small.copy_from(model)  # type: ignore[arg-type]
    # Another handle of the same file is the same model; another file is not.
    with colibri.Model(model.path) as again:
        same = again.session(n_ctx=128)
        same.copy_from(a)
        assert _logits(same, [9]) == _logits(a, [9])
        same.close()
    with colibri.Model(str(Path(__file__).resolve().parents[2] / "models" / "default.colibri")) as default:
        other = default.session(n_ctx=128)
        with pytest.raises(colibri.ColibriError) as e:
            other.copy_from(a)
        assert e.value.status == colibri.Status.INVALID_ARGUMENT
        assert "different models" in str(e.value)
        assert other.position == 0
        other.close()
