"""Fixtures of the OpenAPI conformance tests: the description, and live servers."""

from __future__ import annotations

from typing import Iterator

import pytest

from server import Server
from spec import Spec

KEY = "openapi-test-key"
ALLOWED = "http://allowed.example"


@pytest.fixture(scope="session")
def spec() -> Spec:
    return Spec()


@pytest.fixture(scope="module")
def server() -> Iterator[Server]:
    """An API key, one allowed origin, small caps so every refusal is cheap to reach."""
    s = Server(
        [
            "--api-key", KEY,
            "--allowed-origins", ALLOWED,
            "--max-body", "65536",
            "--timeout", "4",
            "-c", "256",
            "--max-request-tokens", "200",
        ]
    )
    yield s
    assert s.stop() == 0, s.log_text()


@pytest.fixture(scope="module")
def busy_server() -> Iterator[Server]:
    """One sequence and no queue: a second request while one streams gets 503."""
    s = Server(["--parallel", "1", "--queue", "0", "-c", "4096", "--timeout", "30"])
    yield s
    assert s.stop() == 0, s.log_text()
