"""The WSGI example (examples/colibri_wsgi.py): POST /generate per docs/api.md, called directly
with environ dicts, through wsgiref on 127.0.0.1, and as a script."""

from __future__ import annotations

import http.client
import importlib.util
import io
import json
import os
import subprocess
import sys
import threading
from pathlib import Path
from typing import Any, Dict, Iterator, List, Optional, Tuple
from wsgiref.simple_server import make_server
from wsgiref.util import setup_testing_defaults

import pytest

import colibri
from conftest import PYTHON_DIR

EXAMPLE = PYTHON_DIR / "examples" / "colibri_wsgi.py"


def _load_example() -> Any:
    spec = importlib.util.spec_from_file_location("colibri_wsgi", EXAMPLE)
    assert spec and spec.loader
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


wsgi = _load_example()


@pytest.fixture(scope="module")
def app(model: colibri.Model) -> Iterator[Any]:
    a = wsgi.make_app(model, sessions=1, max_body=4096)
    yield a
    a.close()
    assert not model.closed  # the app does not close a model it was given


@pytest.fixture(scope="module")
def small_app(model: colibri.Model) -> Iterator[Any]:
    a = wsgi.make_app(model, sessions=1, n_ctx=16)
    yield a
    a.close()


Response = Tuple[int, Dict[str, str], Any]


def call(app: Any, method: str = "POST", path: str = "/generate", body: Any = None,
         raw: Optional[bytes] = None, content_length: Optional[str] = None,
         extra: Optional[Dict[str, str]] = None) -> Response:
    data = raw if raw is not None else (b"" if body is None else json.dumps(body).encode())
    env: Dict[str, Any] = {
        "REQUEST_METHOD": method,
        "PATH_INFO": path,
        "CONTENT_TYPE": "application/json",
        "CONTENT_LENGTH": str(len(data)) if content_length is None else content_length,
        "wsgi.input": io.BytesIO(data),
    }
    env.update(extra or {})
    setup_testing_defaults(env)
    got: Dict[str, Any] = {}

    def start_response(status: str, headers: List[Tuple[str, str]], exc_info: Any = None) -> Any:
        got["status"], got["headers"] = status, dict(headers)
        return lambda _: None

    out = b"".join(app(env, start_response))
    assert got["headers"]["Content-Type"] == "application/json"
    assert int(got["headers"]["Content-Length"]) == len(out)
    return int(got["status"].split()[0]), got["headers"], json.loads(out)


def assert_error(resp: Response, code: int, param: Optional[str] = None) -> None:
    status, _, body = resp
    assert status == code, body
    assert set(body) == {"error"}
    err = body["error"]
    assert set(err) == {"message", "type", "param", "code"}
    assert isinstance(err["message"], str) and err["message"]
    assert err["type"] == "invalid_request_error"
    assert err["param"] == param
    assert err["code"] is None


def test_good_request(app: Any, model: colibri.Model) -> None:
    status, _, body = call(app, body={"prompt": "In the beginning", "max_tokens": 16, "temperature": 0,
                                      "ignore_eos": True})
    assert status == 200
    assert set(body) == {"text", "tokens", "prompt_tokens", "completion_tokens", "finish_reason"}
    with model.session() as s:
        r = s.complete("In the beginning", max_tokens=16, temperature=0, ignore_eos=True)
    assert body["text"] == r.text
    assert body["tokens"] == r.tokens
    assert body["prompt_tokens"] == len(model.tokenize("In the beginning"))
    assert body["completion_tokens"] == 16 == len(body["tokens"])
    assert body["finish_reason"] == "length"
    # The session is reset between requests: the same request gives the same answer.
    assert call(app, body={"prompt": "In the beginning", "max_tokens": 16, "temperature": 0,
                           "ignore_eos": True})[2] == body


def test_defaults_and_unknown_fields(app: Any) -> None:
    status, _, body = call(app, body={"prompt": "Hello", "stream": False, "n": 3, "extra": {"x": [1]}})
    assert status == 200
    assert body["completion_tokens"] <= 64
    assert body["finish_reason"] in ("length", "stop")
    # Sampled with seed 0 by default: reproducible.
    assert call(app, body={"prompt": "Hello"})[2] == body
    assert call(app, body={"prompt": "Hello", "seed": 0, "temperature": 0.8, "top_k": 40, "top_p": 0.95,
                           "min_p": 0.05, "repetition_penalty": 1.0, "max_tokens": 64})[2] == body


def test_seed_and_sampling_fields(app: Any) -> None:
    base = {"prompt": "Hello", "max_tokens": 12, "temperature": 1.0, "top_k": 0, "top_p": 1, "min_p": 0,
            "ignore_eos": True, "repetition_penalty": 1.1}
    a = call(app, body={**base, "seed": 1})[2]
    b = call(app, body={**base, "seed": 1})[2]
    c = call(app, body={**base, "seed": 2})[2]
    assert a == b and a["tokens"] != c["tokens"]
    assert call(app, body={**base, "seed": 2**64 - 1})[0] == 200


def test_finish_reasons(app: Any, small_app: Any) -> None:
    assert call(app, body={"prompt": "Hello", "max_tokens": 0})[2] == {
        "text": "", "tokens": [], "prompt_tokens": len(app.model.tokenize("Hello")), "completion_tokens": 0,
        "finish_reason": "length"}
    status, _, body = call(small_app, body={"prompt": "Hello world", "max_tokens": 10**12, "temperature": 0,
                                            "ignore_eos": True})
    assert status == 200 and body["finish_reason"] == "context"  # max_tokens clamped to the context
    assert body["prompt_tokens"] + body["completion_tokens"] <= 17
    for seed in range(64):
        body = call(app, body={"prompt": "Hello", "max_tokens": 64, "temperature": 1.5, "top_k": 0,
                               "top_p": 1.0, "min_p": 0.0, "seed": seed})[2]
        if body["finish_reason"] == "stop":
            assert body["completion_tokens"] < 64 and not {395, 397} & set(body["tokens"])
            break
    else:
        pytest.skip("no seed sampled an end-of-sequence token")


def test_not_found(app: Any) -> None:
    for method, path in [("GET", "/"), ("POST", "/"), ("POST", "/generate/"), ("POST", "/v1/completions"),
                         ("GET", "/nope")]:
        assert_error(call(app, method, path, body={"prompt": "x"}), 404)


def test_method_not_allowed(app: Any) -> None:
    for method in ("GET", "PUT", "DELETE", "HEAD", "OPTIONS", "PATCH"):
        resp = call(app, method, body={"prompt": "x"})
        assert_error(resp, 405)
        assert resp[1]["Allow"] == "POST"


def test_web_pages_cannot_call_it(app: Any) -> None:
    # What a page's no-cors fetch sends: text/plain, or a foreign Origin.
    body = {"prompt": "Hello", "max_tokens": 1}
    assert_error(call(app, body=body, extra={"CONTENT_TYPE": "text/plain"}), 415)
    assert_error(call(app, body=body, extra={"CONTENT_TYPE": ""}), 415)
    assert_error(call(app, body=body, extra={"HTTP_ORIGIN": "http://evil.example"}), 403)
    assert call(app, body=body, extra={"CONTENT_TYPE": "application/json; charset=utf-8"})[0] == 200


def test_body_cap(app: Any) -> None:
    assert_error(call(app, raw=b'{"prompt": "' + b"x" * 5000 + b'"}'), 413)
    assert_error(call(app, raw=b"{}", content_length="999999999"), 413)  # refused before reading
    assert call(app, body={"prompt": "x", "max_tokens": 1, "pad": "x" * 3900})[0] == 200  # under the cap


@pytest.mark.parametrize(
    "body, param",
    [
        ({}, "prompt"),
        ({"max_tokens": 3}, "prompt"),
        ({"prompt": 5}, "prompt"),
        ({"prompt": None}, "prompt"),
        ({"prompt": ["Hello"]}, "prompt"),
        ({"prompt": ""}, "prompt"),
        ({"prompt": "x", "max_tokens": -1}, "max_tokens"),
        ({"prompt": "x", "max_tokens": "5"}, "max_tokens"),
        ({"prompt": "x", "max_tokens": 5.5}, "max_tokens"),
        ({"prompt": "x", "max_tokens": 5.0}, "max_tokens"),
        ({"prompt": "x", "max_tokens": True}, "max_tokens"),
        ({"prompt": "x", "max_tokens": None}, "max_tokens"),
        ({"prompt": "x", "temperature": -0.1}, "temperature"),
        ({"prompt": "x", "temperature": "hot"}, "temperature"),
        ({"prompt": "x", "temperature": False}, "temperature"),
        ({"prompt": "x", "top_k": -1}, "top_k"),
        ({"prompt": "x", "top_k": 1.5}, "top_k"),
        ({"prompt": "x", "top_p": 0}, "top_p"),
        ({"prompt": "x", "top_p": 1.01}, "top_p"),
        ({"prompt": "x", "top_p": "0.5"}, "top_p"),
        ({"prompt": "x", "min_p": -0.01}, "min_p"),
        ({"prompt": "x", "min_p": 1.5}, "min_p"),
        ({"prompt": "x", "repetition_penalty": 0}, "repetition_penalty"),
        ({"prompt": "x", "repetition_penalty": -1}, "repetition_penalty"),
        ({"prompt": "x", "seed": -1}, "seed"),
        ({"prompt": "x", "seed": 2**64}, "seed"),
        ({"prompt": "x", "seed": 1.0}, "seed"),
        ({"prompt": "x", "ignore_eos": "true"}, "ignore_eos"),
        ({"prompt": "x", "ignore_eos": 1}, "ignore_eos"),
    ],
)
def test_invalid_fields(app: Any, body: Dict[str, Any], param: str) -> None:
    assert_error(call(app, body=body), 400, param)


@pytest.mark.parametrize(
    "raw",
    [b"", b"not json", b"[1, 2]", b'"prompt"', b"null", b"42", b'{"prompt": "x",}', b'{"prompt": NaN}',
     b'{"prompt": "x", "temperature": Infinity}', b"\xff\xfe\x00garbage", b'{"prompt": "\xff"}'],
)
def test_bodies_that_are_not_json_objects(app: Any, raw: bytes) -> None:
    assert_error(call(app, raw=raw), 400, None)


def test_overflowing_number(app: Any) -> None:
    assert_error(call(app, raw=b'{"prompt": "x", "temperature": 1e400}'), 400, "temperature")


def test_bad_content_length(app: Any) -> None:
    assert_error(call(app, raw=b'{"prompt": "x"}', content_length="abc"), 400)
    assert_error(call(app, raw=b'{"prompt": "x"}', content_length="-5"), 400)
    assert_error(call(app, raw=b'{"prompt": "x"}', content_length=""), 400)  # no body read


def test_prompt_longer_than_the_context(small_app: Any) -> None:
    assert_error(call(small_app, body={"prompt": "a long prompt " * 20}), 400, "prompt")
    assert call(small_app, body={"prompt": "short", "max_tokens": 2})[0] == 200  # still serving


def test_session_pool_replaces_a_panicked_session(model: colibri.Model, monkeypatch: pytest.MonkeyPatch) -> None:
    a = wsgi.make_app(model, sessions=1)
    try:
        first = a._all[0]

        def panicking(*_: Any, **__: Any) -> Any:
            raise colibri.ColibriError(colibri.Status.PANIC, "internal error (panic): simulated")

        monkeypatch.setattr(first, "complete", panicking)
        status, _, body = call(a, body={"prompt": "Hello", "max_tokens": 2})
        assert status == 500 and body["error"]["type"] == "server_error" and "PANIC" in body["error"]["message"]
        assert first.closed and a._all[0] is not first
        assert call(a, body={"prompt": "Hello", "max_tokens": 2})[0] == 200
    finally:
        a.close()


def _http(port: int, method: str, path: str, body: Optional[bytes] = None) -> Tuple[int, Dict[str, str], Any]:
    c = http.client.HTTPConnection("127.0.0.1", port, timeout=30)
    try:
        c.request(method, path, body=body, headers={"Content-Type": "application/json"})
        r = c.getresponse()
        data = r.read()
        return r.status, {k.lower(): v for k, v in r.getheaders()}, json.loads(data)
    finally:
        c.close()


def test_through_wsgiref_on_localhost(model: colibri.Model) -> None:
    a = wsgi.make_app(model, sessions=2, max_body=2048)
    httpd = make_server("127.0.0.1", 0, a, server_class=wsgi.ThreadingWSGIServer, handler_class=QuietHandler)
    port = httpd.server_address[1]
    t = threading.Thread(target=httpd.serve_forever, daemon=True)
    t.start()
    try:
        req = json.dumps({"prompt": "In the beginning", "max_tokens": 16, "temperature": 0}).encode()
        status, headers, body = _http(port, "POST", "/generate", req)
        assert status == 200 and headers["content-type"] == "application/json"
        with model.session() as s:
            r = s.complete("In the beginning", max_tokens=16, temperature=0)
        assert body["text"] == r.text and body["tokens"] == r.tokens
        assert body["finish_reason"] == r.finish_reason
        status, _, body = _http(port, "GET", "/generate")
        assert status == 405 and body["error"]["type"] == "invalid_request_error"
        assert _http(port, "POST", "/missing", req)[0] == 404
        status, _, body = _http(port, "POST", "/generate", b'{"prompt": "' + b"y" * 3000 + b'"}')
        assert status == 413 and body["error"]["param"] is None
        assert _http(port, "POST", "/generate", b'{"prompt": 1}')[2]["error"]["param"] == "prompt"
        # Concurrent requests on the two pooled sessions agree with each other.
        results: List[Any] = []
        ts = [threading.Thread(target=lambda: results.append(_http(port, "POST", "/generate", req)[2]))
              for _ in range(4)]
        for x in ts:
            x.start()
        for x in ts:
            x.join()
        assert len(results) == 4 and all(r == results[0] for r in results)
    finally:
        httpd.shutdown()
        httpd.server_close()
        a.close()


class QuietHandler(wsgi.QuietHandler):  # type: ignore[name-defined,misc]
    def log_message(self, format: str, *args: Any) -> None:  # noqa: A002
        pass


def test_script_main_serves(model_path: Path) -> None:
    env = dict(os.environ, COLIBRI_MODEL=str(model_path), COLIBRI_WSGI_LOG="0")
    p = subprocess.Popen([sys.executable, str(EXAMPLE), "--port", "0"], env=env, stderr=subprocess.PIPE,
                         stdout=subprocess.DEVNULL, text=True)
    try:
        assert p.stderr is not None
        line = p.stderr.readline()
        assert "serving" in line and "/generate" in line, line
        port = int(line.rsplit(":", 1)[1].split("/")[0])
        status, _, body = _http(port, "POST", "/generate", b'{"prompt": "Hi", "max_tokens": 3, "temperature": 0}')
        assert status == 200 and body["completion_tokens"] <= 3
    finally:
        p.terminate()
        p.wait(10)
        if p.stderr is not None:
            p.stderr.close()


def test_script_without_a_model_is_a_usage_error() -> None:
    env = {k: v for k, v in os.environ.items() if k != "COLIBRI_MODEL"}
    p = subprocess.run([sys.executable, str(EXAMPLE)], env=env, capture_output=True, text=True)
    assert p.returncode == 2 and "COLIBRI_MODEL" in p.stderr


def test_module_level_application_reads_the_environment(model_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    mod = _load_example()  # a fresh copy with no app built yet
    monkeypatch.setenv("COLIBRI_MODEL", str(model_path))
    monkeypatch.setenv("COLIBRI_SESSIONS", "2")
    try:
        status, _, body = call(mod.application, body={"prompt": "Hi", "max_tokens": 2})
        assert status == 200 and len(mod._default._all) == 2
    finally:
        if mod._default is not None:
            mod._default.close()
