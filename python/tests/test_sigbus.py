"""A model file truncated or rewritten in place while mapped: with ``sigbus_guard=True`` the
process survives and calls raise ColibriError MODEL_CHANGED (the read of the chat template inside
the library faults and is absorbed by the guard); without the guard the same call kills the
process with SIGBUS (run in a child so that this suite survives)."""

import shutil
import signal
import subprocess
import sys
from pathlib import Path

import pytest

import colibri
from colibri import ColibriError, Status


def _damaged_call(path: Path, guard: bool) -> None:
    m = colibri.Model(path, sigbus_guard=guard)
    s = m.session()
    s.infer([1, 2, 3])
    with open(path, "r+b") as f:
        f.truncate(0)
    m.chat([{"role": "user", "content": "hi"}])


def test_a_truncated_file_is_model_changed_not_a_crash(model_path: Path, tmp_path: Path) -> None:
    path = tmp_path / "m.colibri"
    shutil.copy(model_path, path)
    with pytest.raises(ColibriError) as e:
        _damaged_call(path, guard=True)
    assert e.value.status == Status.MODEL_CHANGED
    # The process and the library go on: a fresh model works.
    with colibri.Model(model_path) as fresh:
        fresh.session().infer([1, 2, 3])


def test_without_the_guard_the_same_call_kills_the_process(model_path: Path, tmp_path: Path) -> None:
    path = tmp_path / "m.colibri"
    shutil.copy(model_path, path)
    code = (
        "import sys; sys.path[:0] = " + repr(sys.path) + "\n"
        "from pathlib import Path\n"
        "from test_sigbus import _damaged_call\n"
        f"_damaged_call(Path({str(path)!r}), guard=False)\n"
    )
    r = subprocess.run([sys.executable, "-c", code], cwd=Path(__file__).parent, capture_output=True, timeout=120)
    assert r.returncode == -signal.SIGBUS, (r.returncode, r.stderr[-500:])
