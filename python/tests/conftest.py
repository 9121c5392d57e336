"""Shared fixtures: the repository paths, libcolibri from target/release (or the installed
package's), and the Qwen2-MoE fixture converted once per test session with target/release/colibri."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any, Dict, Iterator, List

import pytest

PYTHON_DIR = Path(__file__).resolve().parent.parent
REPO = PYTHON_DIR.parent
# cargo's output: $CARGO_TARGET_DIR (relative to the repository root) or target/.
RELEASE = REPO / os.environ.get("CARGO_TARGET_DIR", "target") / "release"
CLI = RELEASE / ("colibri.exe" if sys.platform == "win32" else "colibri")
FIXTURE = REPO / "tests" / "fixtures" / "models" / "qwen2_moe_shared"

# COLIBRI_TEST_INSTALLED=1 tests the installed package (the wheel, scripts/test-python.sh) and
# the library inside it. Otherwise the package of this source tree with the library in
# target/release unless the caller chose one: set before colibri is imported anywhere.
INSTALLED = os.environ.get("COLIBRI_TEST_INSTALLED") == "1"
if not INSTALLED:
    os.environ.setdefault("COLIBRI_LIB_PATH", str(RELEASE))
    sys.path.insert(0, str(PYTHON_DIR))

import colibri  # noqa: E402


def _need_build() -> None:
    if not CLI.is_file():
        pytest.exit(f"{CLI} is missing: run `cargo build --release` in {REPO} first", returncode=2)


@pytest.fixture(scope="session")
def cli() -> Path:
    _need_build()
    return CLI


@pytest.fixture(scope="session")
def model_path(tmp_path_factory: pytest.TempPathFactory, cli: Path) -> Path:
    """The fixture converted to .colibri (once per session)."""
    out = tmp_path_factory.mktemp("models") / "qwen2_moe_shared.colibri"
    subprocess.run([str(cli), "convert", str(FIXTURE), "-o", str(out)], check=True, capture_output=True)
    return out


@pytest.fixture(scope="session")
def oracle() -> Dict[str, Any]:
    with open(FIXTURE / "oracle" / "meta.json", encoding="utf-8") as f:
        return json.load(f)


@pytest.fixture(scope="session")
def chat_oracle() -> Dict[str, Any]:
    with open(FIXTURE / "oracle" / "chat.json", encoding="utf-8") as f:
        return json.load(f)


@pytest.fixture(scope="session")
def model(model_path: Path) -> Iterator[colibri.Model]:
    m = colibri.Model(model_path)
    yield m
    m.close()


@pytest.fixture()
def session(model: colibri.Model) -> Iterator[colibri.Session]:
    with model.session() as s:
        yield s


def serve_openai(extra: List[str], api_key: str = "none") -> Iterator[Any]:
    """`colibri serve` on the shipped default model with `extra` arguments, on a free loopback
    port: yields an official `openai` client for it once the model is ready, stops the server
    afterwards (it must exit 0). For module-scoped fixtures (`yield from serve_openai(...)`)."""
    import threading

    import openai

    _need_build()
    model = REPO / "models" / "default.colibri"
    proc = subprocess.Popen(
        [str(CLI), "serve", "-m", str(model), "--port", "0", "-t", "1", *extra],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        text=True,
    )
    found: List[str] = []
    ready = threading.Event()

    def read_log() -> None:
        assert proc.stderr is not None
        for line in proc.stderr:
            if line.startswith("listening on http://"):
                found.append(line.split("http://", 1)[1].strip())
            if line.startswith("model ") and "ready" in line:
                ready.set()

    threading.Thread(target=read_log, daemon=True).start()
    try:
        assert ready.wait(60), "the server did not become ready"
        yield openai.OpenAI(base_url=f"http://{found[0]}/v1", api_key=api_key, max_retries=0, timeout=60)
    finally:
        proc.terminate()
        assert proc.wait(60) == 0
