"""Threads: ctypes releases the GIL, so two sessions on two threads run at the same time and get
the same answers as one thread; one session refuses a second concurrent call."""

from __future__ import annotations

import math
import threading
import time
from typing import Any, Dict, List, Tuple

import pytest

import colibri

PROMPT = [i % 390 for i in range(7, 307)]
# Seconds each thread's timed span lasts at least: a prefill of PROMPT takes a few ms on fast
# kernels (4 ms on an AMX Xeon), as little as one thread's start can lag the other's on a busy
# two-core machine, so each thread repeats it for this long.
SPAN_SECONDS = 0.3


def test_two_sessions_in_two_threads_overlap_and_agree(model: colibri.Model, oracle: Dict[str, Any]) -> None:
    with model.session() as s:
        t0 = time.perf_counter()
        ref_logits = list(s.infer(PROMPT))
        reps = max(1, math.ceil(SPAN_SECONDS / max(time.perf_counter() - t0, 1e-6)))
        s.reset()
        ref_ids = s.generate_ids(oracle["greedy_prompt"], max_tokens=32, temperature=0, ignore_eos=True)
    assert ref_ids == oracle["greedy_f32"]

    barrier = threading.Barrier(2)
    spans: Dict[int, Tuple[float, float]] = {}
    out: Dict[int, Any] = {}
    errors: List[BaseException] = []

    def work(i: int) -> None:
        try:
            with model.session() as s:
                barrier.wait()
                t0 = time.perf_counter()
                for r in range(reps):
                    if r:
                        s.reset()
                    logits = s.infer(PROMPT)
                spans[i] = (t0, time.perf_counter())
                s.reset()
                ids = s.generate_ids(oracle["greedy_prompt"], max_tokens=32, temperature=0, ignore_eos=True)
                out[i] = (logits, ids)
        except BaseException as e:  # pragma: no cover - reported below
            errors.append(e)

    ts = [threading.Thread(target=work, args=(i,)) for i in range(2)]
    for t in ts:
        t.start()
    for t in ts:
        t.join()
    assert not errors, errors
    for i in range(2):
        logits, ids = out[i]
        assert list(logits) == ref_logits  # bit-identical whatever the thread
        assert ids == ref_ids
    # Both C calls were in flight at the same time: the GIL was released during them.
    (a0, a1), (b0, b1) = spans[0], spans[1]
    overlap = min(a1, b1) - max(a0, b0)
    assert overlap > 0.5 * min(a1 - a0, b1 - b0), (spans, overlap)


def test_python_runs_while_a_call_is_in_c(model: colibri.Model) -> None:
    # One long C call (a prefill of most of the context; its length does not depend on how fast
    # the kernels are), and the main thread counting in Python meanwhile. Were the GIL held
    # during the call, the count could only advance before and after it.
    with model.session() as s:
        long_prompt = [i % 390 for i in range(7, 7 + min(s.n_ctx, 4096) - 8)]
    done = threading.Event()
    with model.session() as s:
        t = threading.Thread(target=lambda: (s.infer(long_prompt), done.set()))
        t.start()
        ticks = 0
        start = time.perf_counter()
        while not done.is_set():
            ticks += 1
        elapsed = time.perf_counter() - start
        t.join()
    rate = ticks / elapsed  # Python-side increments per second while the call ran
    assert ticks > 10_000 and rate > 100_000, (ticks, elapsed)


def test_a_model_is_shared_by_many_threads(model: colibri.Model) -> None:
    texts = [f"thread {i}: héllo wörld 🙂 " * (i + 1) for i in range(8)]
    bad: List[str] = []

    def work(text: str) -> None:
        for _ in range(30):
            if model.detokenize(model.tokenize(text)) != text:
                bad.append(text)

    ts = [threading.Thread(target=work, args=(t,)) for t in texts]
    for t in ts:
        t.start()
    for t in ts:
        t.join()
    assert not bad


def test_one_session_refuses_a_concurrent_call(model: colibri.Model) -> None:
    inside = threading.Event()
    release = threading.Event()
    errors: List[BaseException] = []

    def hold(tok: int, text: str) -> None:
        inside.set()
        release.wait(10)

    with model.session() as s:
        t = threading.Thread(
            target=lambda: s.complete("Hello", max_tokens=2, temperature=0, ignore_eos=True, callback=hold)
        )
        t.start()
        assert inside.wait(10)
        for call in (lambda: s.infer([1]), lambda: s.reset(), lambda: s.position):
            try:
                call()
            except colibri.ColibriError as e:
                errors.append(e)
        release.set()
        t.join()
        assert len(errors) == 3 and all(e.status == colibri.Status.BUSY and "busy" in str(e) for e in errors)
        s.infer([1])  # free again


def test_close_waits_for_a_call_on_another_thread(model: colibri.Model) -> None:
    inside = threading.Event()
    result: Dict[str, Any] = {}
    s = model.session()

    def slow(tok: int, text: str) -> None:
        inside.set()
        time.sleep(0.2)

    def run() -> None:
        result["r"] = s.complete("Hello", max_tokens=2, temperature=0, ignore_eos=True, callback=slow)

    t = threading.Thread(target=run)
    t.start()
    assert inside.wait(10)
    s.close()  # waits until the generation returns, then frees
    t.join()
    assert s.closed and len(result["r"].tokens) == 2


def test_close_from_inside_a_callback_is_refused(model: colibri.Model) -> None:
    with model.session() as s:
        def cb(tok: int, text: str) -> None:
            s.close()

        with pytest.raises(colibri.ColibriError, match="inside one of its own calls"):
            s.complete("Hello", max_tokens=3, callback=cb)
        assert not s.closed
