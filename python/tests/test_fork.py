"""A model used before ``fork()`` works in the child — ``multiprocessing`` with the "fork" start
method, as pre-forking servers (gunicorn, uWSGI) and worker pools use it: the child starts
worker threads of its own instead of waiting forever for the parent's, which do not exist in a
child. The model's pages stay shared."""

from __future__ import annotations

import multiprocessing
import sys
from typing import Any, List

import pytest

import colibri

pytestmark = pytest.mark.skipif(sys.platform == "win32", reason="no fork() on Windows")

IDS = [3, 14, 15, 92, 65, 35]


def _logits(model: colibri.Model) -> List[float]:
    with model.session() as s:
        return [float(v) for v in s.infer(IDS)]


def _child(model: colibri.Model, out: Any) -> None:
    out.put(_logits(model))


@pytest.mark.parametrize("n_threads", [0, 2])
def test_a_forked_child_runs_the_model_used_before_the_fork(model_path: Any, n_threads: int) -> None:
    with colibri.Model(model_path, n_threads=n_threads) as model:
        want = _logits(model)  # the parent's worker threads now exist
        ctx = multiprocessing.get_context("fork")
        out = ctx.Queue()
        child = ctx.Process(target=_child, args=(model, out))
        child.start()
        try:
            got = out.get(timeout=60)
        except Exception:  # queue.Empty: the child hung (or died)
            got = None
        child.join(10)
        if child.is_alive():
            child.kill()
            child.join()
        assert got == want, "the child hung (60 s) or computed other logits"
        assert child.exitcode == 0
        assert _logits(model) == want, "the parent after the fork"
