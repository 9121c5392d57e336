"""Generation: greedy ids against the oracle and the CLI, streaming, sampling options, stop
strings, finish reasons (length, stop, eos, context_full, callback), callbacks (stop /
exceptions), iterator lifetime."""

from __future__ import annotations

import subprocess
from pathlib import Path
from typing import Any, Dict, List

import pytest

import colibri

PROMPTS = ["Hello", "In the beginning", "café-style? 🙂", "The quick brown fox jumps over the lazy dog."]


def test_greedy_ids_equal_the_oracle(session: colibri.Session, oracle: Dict[str, Any]) -> None:
    ids = session.generate_ids(oracle["greedy_prompt"], max_tokens=32, temperature=0, ignore_eos=True)
    assert ids == oracle["greedy_f32"]
    assert session.position == len(oracle["greedy_prompt"]) + 32 - 1  # the last id is not fed
    r = session.last_result
    assert r is not None and r.finish_reason == "length" and r.prompt_tokens == 5 and r.completion_tokens == 32
    assert r.n_cached == session.position


def test_greedy_ids_from_numpy_prompt(model: colibri.Model, oracle: Dict[str, Any]) -> None:
    np = pytest.importorskip("numpy")
    with model.session() as s:
        prompt = np.array(oracle["greedy_prompt"], dtype=np.int64)
        assert s.generate_ids(prompt, max_tokens=32, temperature=0, ignore_eos=True) == oracle["greedy_f32"]


def test_oracle_greedy_text_equals_the_cli(
    model: colibri.Model, model_path: Path, cli: Path, oracle: Dict[str, Any], tmp_path: Path
) -> None:
    """The oracle's greedy prompt is ids that do not round-trip through text, so the CLI gets it as
    embedding rows (`run --embedding`): its greedy text must decode the oracle's greedy ids, which
    the binding reproduces."""
    np = pytest.importorskip("numpy")
    from test_infer import _embedding_table

    emb = tmp_path / "prompt.npy"
    np.save(emb, _embedding_table()[oracle["greedy_prompt"]].astype(np.float32))
    out = subprocess.run(
        [str(cli), "run", "-m", str(model_path), "--embedding", str(emb), "-n", "32", "--temp", "0",
         "--ignore-eos"],
        capture_output=True, check=True,
    )
    cli_text = out.stdout.decode("utf-8")[:-1]
    with model.session() as s:
        r = s.complete(oracle["greedy_prompt"], max_tokens=32, temperature=0, ignore_eos=True)
    assert r.tokens == oracle["greedy_f32"]
    assert r.text == cli_text == model.detokenize(oracle["greedy_f32"])


@pytest.mark.parametrize("prompt", PROMPTS)
def test_greedy_text_equals_the_cli(model: colibri.Model, model_path: Path, cli: Path, prompt: str) -> None:
    n = 24
    out = subprocess.run(
        [str(cli), "run", "-m", str(model_path), "-p", prompt, "-n", str(n), "--temp", "0", "--ignore-eos"],
        capture_output=True, check=True,
    )
    cli_text = out.stdout.decode("utf-8")
    assert cli_text.endswith("\n")  # run ends its output with one newline
    cli_text = cli_text[:-1]
    with model.session() as s:
        r = s.complete(prompt, max_tokens=n, temperature=0, ignore_eos=True)
        assert r.text == cli_text
        assert len(r.tokens) == n
        s.reset()
        pieces = list(s.generate(prompt, max_tokens=n, temperature=0, ignore_eos=True))
        assert "".join(pieces) == cli_text
        assert all(isinstance(p, str) and p for p in pieces)
        s.reset()
        assert s.generate_ids(prompt, max_tokens=n, temperature=0, ignore_eos=True) == r.tokens
    assert model.detokenize(r.tokens) == cli_text


def test_streaming_pieces_concatenate_to_the_full_text(session: colibri.Session, model: colibri.Model) -> None:
    pieces = list(session.generate("Once upon a time", max_tokens=40, temperature=0.9, seed=7, ignore_eos=True))
    r = session.last_result
    assert r is not None
    assert "".join(pieces) == r.text == "".join(r.pieces)
    assert r.text == model.detokenize(r.tokens)
    assert len(r.tokens) == 40 and r.finish_reason == "length"


def test_callback_sees_every_piece(session: colibri.Session) -> None:
    seen: List[Any] = []
    r = session.complete("Hello", max_tokens=10, temperature=0, ignore_eos=True,
                         callback=lambda tok, text: seen.append((tok, text)))
    assert [t for t, _ in seen if t >= 0] == r.tokens
    assert "".join(text for _, text in seen) == r.text


def test_sampling_is_seeded(model: colibri.Model) -> None:
    def run(seed: int, **kw: Any) -> List[int]:
        with model.session() as s:
            return s.generate_ids("Hello", max_tokens=24, temperature=1.0, seed=seed, ignore_eos=True, **kw)

    assert run(1) == run(1)
    assert run(1) != run(2)
    assert run(0) == run(0)  # 0 is a seed like any other
    # No seed: a fresh one per call (COLIBRI_SEED_RANDOM), as llama.cpp does.
    def fresh() -> List[int]:
        with model.session() as s:
            return s.generate_ids("Hello", max_tokens=24, temperature=1.0, ignore_eos=True)

    assert fresh() != fresh()
    assert run(3, top_k=1) == run(4, top_k=1)  # top_k 1 is greedy whatever the seed
    with model.session() as s:
        greedy = s.generate_ids("Hello", max_tokens=24, temperature=0, ignore_eos=True)
    assert run(5, top_k=1) == greedy
    assert run(6, repetition_penalty=1.3, penalty_last_n=16, presence_penalty=0.5,
               frequency_penalty=0.5, top_p=0.9, min_p=0.01) == run(6, repetition_penalty=1.3, penalty_last_n=16,
                                                                    presence_penalty=0.5, frequency_penalty=0.5,
                                                                    top_p=0.9, min_p=0.01)


def test_generation_continues_from_the_cache(model: colibri.Model, oracle: Dict[str, Any]) -> None:
    g = oracle["greedy_f32"]
    with model.session() as s:
        first = s.generate_ids(oracle["greedy_prompt"], max_tokens=10, temperature=0, ignore_eos=True)
        assert first == g[:10]
        # The last generated id is not in the cache yet: feed it and continue.
        rest = s.generate_ids(first[-1:], max_tokens=22, temperature=0, ignore_eos=True)
        assert first + rest == g


def test_finish_reason_context_full(model: colibri.Model) -> None:
    with model.session(n_ctx=12) as s:
        r = s.complete([1, 2, 3, 4, 5], max_tokens=100, temperature=0, ignore_eos=True)
        assert r.finish_reason == "context_full"
        assert s.position == s.n_ctx == 12 == r.n_cached
        assert 0 < len(r.tokens) <= 12 - 5 + 1
        with pytest.raises(colibri.ColibriError) as e:  # nothing more fits
            s.complete([1], max_tokens=1)
        assert e.value.status == colibri.Status.CONTEXT_FULL


def test_finish_reason_eos_at_end_of_sequence(model: colibri.Model) -> None:
    eos = {395, 397}
    with model.session() as s:
        for seed in range(64):
            s.reset()
            r = s.complete("Hello", max_tokens=64, temperature=1.5, top_k=0, top_p=1.0, min_p=0.0, seed=seed)
            if r.finish_reason == "eos":
                break
        else:
            pytest.skip("no seed sampled an end-of-sequence token")
        assert len(r.tokens) < 64
        assert not eos & set(r.tokens)  # the EOS that stopped it is not reported
        assert s.position == r.prompt_tokens + len(r.tokens)
        # With ignore_eos the same seed runs to the end, through the EOS.
        s.reset()
        r2 = s.complete("Hello", max_tokens=64, temperature=1.5, top_k=0, top_p=1.0, min_p=0.0, seed=seed,
                        ignore_eos=True)
        assert r2.finish_reason == "length" and r2.tokens[: len(r.tokens)] == r.tokens
        assert r2.tokens[len(r.tokens)] in eos


def test_max_tokens_zero(session: colibri.Session) -> None:
    r = session.complete("Hello", max_tokens=0)
    assert r.tokens == [] and r.text == "" and r.finish_reason == "length"
    assert session.position == r.prompt_tokens  # the prompt was still fed


def test_callback_can_stop(session: colibri.Session) -> None:
    n = 0

    def cb(tok: int, text: str) -> bool:
        nonlocal n
        n += 1
        return n == 3

    r = session.complete("Hello", max_tokens=50, temperature=0, ignore_eos=True, callback=cb)
    assert len(r.tokens) == 3 and r.finish_reason == "callback"
    assert r.n_cached == session.position == r.prompt_tokens + 2  # the last id is not fed


def test_callback_returning_falsy_values_continues(session: colibri.Session) -> None:
    """The C convention: zero (None, False, 0 in Python) continues, non-zero stops."""
    r = session.complete("Hello", max_tokens=6, temperature=0, ignore_eos=True, callback=lambda t, x: 0)
    assert r.finish_reason == "length" and len(r.tokens) == 6
    session.reset()
    r = session.complete("Hello", max_tokens=6, temperature=0, ignore_eos=True, callback=lambda t, x: 1)
    assert r.finish_reason == "callback" and len(r.tokens) == 1


def test_callback_exception_is_reraised_after_the_call(session: colibri.Session) -> None:
    class Boom(Exception):
        pass

    calls = 0

    def cb(tok: int, text: str) -> None:
        nonlocal calls
        calls += 1
        if calls == 2:
            raise Boom("raised in the callback")

    with pytest.raises(Boom, match="raised in the callback"):
        session.complete("Hello", max_tokens=50, temperature=0, ignore_eos=True, callback=cb)
    assert calls == 2  # generation stopped at the exception
    # The session is fine afterwards.
    session.reset()
    assert len(session.generate_ids("Hello", max_tokens=4, temperature=0, ignore_eos=True)) == 4


def test_breaking_out_of_the_stream_stops_generation(session: colibri.Session) -> None:
    it = session.generate("Hello", max_tokens=1000, temperature=0, ignore_eos=True)
    got = []
    for piece in it:
        got.append(piece)
        if len(got) == 3:
            break
    it.close()  # type: ignore[attr-defined]
    r = session.last_result
    assert r is not None and r.finish_reason == "callback" and len(r.tokens) < 1000
    assert session.position < 100
    session.infer([1])  # free again


def test_session_is_busy_while_a_stream_runs(session: colibri.Session) -> None:
    it = session.generate("Hello", max_tokens=20, temperature=0, ignore_eos=True)
    next(it)
    with pytest.raises(colibri.ColibriError, match="busy") as e:
        session.infer([1])
    assert e.value.status == colibri.Status.BUSY
    with pytest.raises(colibri.ColibriError, match="busy"):
        session.complete([1], max_tokens=1)
    rest = list(it)
    assert len(rest) >= 1
    session.infer([1])


def test_closing_the_session_stops_a_running_stream(model: colibri.Model) -> None:
    s = model.session()
    it = s.generate("Hello", max_tokens=2000, temperature=0, ignore_eos=True)
    next(it)
    s.close()  # stops the worker at its next token, then frees
    assert s.closed
    list(it)  # drains what was produced; no crash
    with pytest.raises(colibri.ColibriError, match="closed"):
        s.generate_ids([1], max_tokens=1)


def test_unstarted_stream_on_a_closed_session(model: colibri.Model) -> None:
    s = model.session()
    it = s.generate("Hello", max_tokens=5)
    s.close()
    with pytest.raises(colibri.ColibriError, match="closed"):
        next(it)


def test_chat_prompt_generation(model: colibri.Model) -> None:
    text = model.chat([{"role": "user", "content": "Hi!"}])
    ids = model.tokenize(text, add_special=False)
    with model.session() as s:
        r = s.complete(ids, max_tokens=8, temperature=0, ignore_eos=True)
    assert len(r.tokens) == 8 and r.prompt_tokens == len(ids)


# -- stop strings ------------------------------------------------------------------------------

STOP_PROMPT = "In the beginning"


@pytest.fixture(scope="module")
def free_run(model: colibri.Model) -> colibri.GenerationResult:
    """Greedy text with no stop string: the stop tests pick their strings from it."""
    with model.session() as s:
        r = s.complete(STOP_PROMPT, max_tokens=32, temperature=0, ignore_eos=True)
    assert r.finish_reason == "length" and len(r.pieces) >= 8
    return r


def _check_stopped(r: colibri.GenerationResult, free: colibri.GenerationResult, stops: List[str]) -> None:
    """`r` ended at the first of `stops` in the free run's text: its text is everything before
    it, no stop string (nor a piece holding one) was returned, its ids are a prefix of the free
    run's."""
    cut = min(free.text.index(s) for s in stops if s in free.text)
    assert r.finish_reason == "stop"
    assert r.text == free.text[:cut] == "".join(r.pieces)
    for s in stops:
        assert s not in r.text
        assert not any(s in p for p in r.pieces)
    assert 0 < len(r.tokens) < len(free.tokens) and r.tokens == free.tokens[: len(r.tokens)]
    assert r.n_cached == r.prompt_tokens + len(r.tokens) - 1


def test_stop_string_inside_one_piece(model: colibri.Model, free_run: colibri.GenerationResult) -> None:
    i = next(i for i, p in enumerate(free_run.pieces) if i >= 3 and len(p.strip()) >= 2)
    stop = free_run.pieces[i].strip()[:2]
    with model.session() as s:
        r = s.complete(STOP_PROMPT, max_tokens=32, temperature=0, ignore_eos=True, stop=[stop])
    _check_stopped(r, free_run, [stop])


def test_stop_string_across_pieces_is_held_back(model: colibri.Model, free_run: colibri.GenerationResult) -> None:
    """A stop string that starts in one piece and ends in the next: the first half is held back
    and never delivered, through the stream or the callback."""
    p = free_run.pieces
    i = next(i for i in range(2, len(p) - 1) if len(p[i]) >= 2 and len(p[i + 1]) >= 2)
    stop = p[i][-2:] + p[i + 1][:2]
    seen: List[str] = []
    with model.session() as s:
        r = s.complete(STOP_PROMPT, max_tokens=32, temperature=0, ignore_eos=True, stop=stop,
                       callback=lambda tok, text: seen.append(text))
        _check_stopped(r, free_run, [stop])
        assert "".join(seen) == r.text
        s.reset()
        streamed = list(s.generate(STOP_PROMPT, max_tokens=32, temperature=0, ignore_eos=True, stop=[stop]))
        assert "".join(streamed) == r.text and s.last_result is not None
        assert s.last_result.finish_reason == "stop"
        assert not any(stop in piece for piece in streamed)
        s.reset()
        assert s.generate_ids(STOP_PROMPT, max_tokens=32, temperature=0, ignore_eos=True, stop=[stop]) == r.tokens


def test_the_earliest_of_several_stop_strings_wins(model: colibri.Model, free_run: colibri.GenerationResult) -> None:
    text = free_run.text
    late = text[-6:].strip() or text[-6:]
    early = text[len(text) // 3:len(text) // 3 + 3]
    absent = "\u2603never-generated\u2603"
    with model.session() as s:
        r = s.complete(STOP_PROMPT, max_tokens=32, temperature=0, ignore_eos=True, stop=[late, absent, early])
    _check_stopped(r, free_run, [late, early])


def test_stop_strings_that_never_appear_change_nothing(model: colibri.Model, free_run: colibri.GenerationResult) -> None:
    with model.session() as s:
        r = s.complete(STOP_PROMPT, max_tokens=32, temperature=0, ignore_eos=True, stop=["\u2603", ""])
        assert r.finish_reason == "length" and r.text == free_run.text and r.tokens == free_run.tokens
        s.reset()
        r = s.complete(STOP_PROMPT, max_tokens=32, temperature=0, ignore_eos=True, stop=[])
        assert r.finish_reason == "length" and r.text == free_run.text
