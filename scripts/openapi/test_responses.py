"""Real answers of a live server to representative requests, successes and every refusal the
server can be driven to, each checked against docs/openapi.yaml: the status is the expected one
and documented, the headers and the body (JSON or each event of a stream) valid."""

from __future__ import annotations

import json
import time

import pytest

from conftest import ALLOWED, KEY
from http_raw import connect, head_bytes, read_response, request, send_partial

AUTH = [("Authorization", f"Bearer {KEY}")]
JSON = AUTH + [("Content-Type", "application/json")]
CHAT = [{"role": "system", "content": "Be brief."}, {"role": "user", "content": "Who made the heaven?"}]
PARTS = [{"role": "user", "content": [{"type": "text", "text": "In the "}, {"type": "text", "text": "beginning"}]}]

# (method, path, headers, JSON body or raw bytes or None, expected status, expected error code)
CASES = [
    ("GET", "/health", [], None, 200, None),
    ("GET", "/v1/models", AUTH, None, 200, None),
    ("GET", "/v1/models/default", AUTH, None, 200, None),
    ("GET", "/metrics", AUTH, None, 200, None),
    ("HEAD", "/health", [], None, 200, None),
    ("HEAD", "/v1/models", AUTH, None, 200, None),
    ("POST", "/v1/completions", JSON, {"prompt": "In the beginning", "max_tokens": 4, "temperature": 0}, 200, None),
    ("POST", "/v1/completions", JSON,
     {"model": "default", "prompt": [[1, 2, 3]], "max_tokens": 3, "logprobs": 2, "return_routing": True,
      "stop": ["\n", "God"], "seed": 7, "top_k": 5, "user": "u", "tools": [], "n": 1}, 200, None),
    ("POST", "/v1/completions", JSON,
     {"prompt": ["And the LORD said"], "max_tokens": 4, "stream": True, "logprobs": 1, "return_routing": True,
      "stream_options": {"include_usage": True}}, 200, None),
    ("POST", "/v1/completions", JSON, {"prompt": "x", "max_tokens": 0}, 200, None),
    ("POST", "/v1/chat/completions", JSON, {"messages": CHAT, "max_tokens": 4, "temperature": 0}, 200, None),
    ("POST", "/v1/chat/completions", JSON,
     {"messages": PARTS, "max_completion_tokens": 3, "logprobs": True, "top_logprobs": 2, "return_routing": True,
      "routing": "gumbel", "moe_top_k": 1, "response_format": {"type": "text"}}, 200, None),
    ("POST", "/v1/chat/completions", JSON,
     {"messages": CHAT, "max_tokens": 4, "stream": True, "logprobs": True, "top_logprobs": 1,
      "stream_options": {"include_usage": True}}, 200, None),
    ("POST", "/v1/chat/completions", JSON, {"messages": CHAT, "max_tokens": 3, "stream": True}, 200, None),
    ("POST", "/v1/embeddings", JSON, {"model": "default", "input": ["In the beginning", [1, 2, 3]]}, 200, None),
    ("POST", "/v1/embeddings", JSON, {"input": "x", "encoding_format": "base64", "dimensions": 256, "user": 1}, 200,
     None),
    ("POST", "/v1/embeddings", JSON, {"input": "x", "dimensions": 3}, 400, None),
    ("POST", "/v1/embeddings", JSON, {"input": "x", "temperature": 0.5}, 400, "unsupported_parameter"),
    ("POST", "/v1/embeddings", JSON, {"input": "word " * 300}, 400, "context_length_exceeded"),
    ("POST", "/v1/embeddings", JSON, {"input": "x", "model": "nope"}, 404, "model_not_found"),
    ("POST", "/generate", JSON, {"prompt": "In the beginning", "max_tokens": 4, "whatever": [1]}, 200, None),
    ("POST", "/generate", JSON, {"prompt": "In the beginning", "max_tokens": 3, "return_routing": True}, 200, None),
    # 400
    ("POST", "/v1/completions", JSON, b"{not json", 400, None),
    ("POST", "/v1/completions", JSON, b"[1, 2]", 400, None),
    ("POST", "/v1/completions", JSON, {}, 400, None),
    ("POST", "/v1/completions", JSON, {"prompt": "x", "temperature": 101}, 400, None),
    ("POST", "/v1/completions", JSON, {"prompt": "x", "top_k": 1.0}, 400, None),
    ("POST", "/v1/completions", JSON, {"prompt": "x", "max_token": 3}, 400, "unsupported_parameter"),
    ("POST", "/v1/completions", JSON, {"prompt": [99999999]}, 400, None),
    ("POST", "/v1/completions", JSON, {"prompt": "x", "max_tokens": 250}, 400, "request_too_large"),
    ("POST", "/v1/completions", JSON, {"prompt": "word " * 300}, 400, "context_length_exceeded"),
    ("POST", "/v1/chat/completions", JSON, {"messages": CHAT, "tools": [{"type": "function"}]}, 400, None),
    ("POST", "/v1/chat/completions", JSON, {"messages": CHAT, "tool_choice": "required"}, 400, None),
    ("POST", "/v1/chat/completions", JSON, {"messages": []}, 400, None),
    ("POST", "/v1/chat/completions", JSON, {"messages": CHAT, "top_logprobs": 2}, 400, None),
    ("POST", "/generate", JSON, {"prompt": 5}, 400, None),
    ("POST", "/generate", JSON, {"prompt": "x", "top_p": 0}, 400, None),
    ("GET", "/v1/models", AUTH + [("Host", "localhost"), ("Host", "localhost")], None, 400, None),
    ("GET", "/v1/models", AUTH + [("Origin", ALLOWED), ("Origin", ALLOWED)], None, 400, None),
    ("GET", "/v1/models/%FF", AUTH, None, 400, None),
    # 401, 403, 404, 405, 413, 415, 431
    ("GET", "/v1/models", [], None, 401, "invalid_api_key"),
    ("POST", "/generate", [("Authorization", "Bearer wrong"), ("Content-Type", "application/json")],
     {"prompt": "x"}, 401, "invalid_api_key"),
    ("HEAD", "/metrics", [], None, 401, None),
    ("OPTIONS", "/v1/models", [], None, 401, "invalid_api_key"),
    ("GET", "/v1/models", AUTH + [("Host", "evil.example")], None, 403, "invalid_host"),
    ("GET", "/v1/models", AUTH + [("Origin", "http://evil.example")], None, 403, "invalid_origin"),
    ("POST", "/v1/completions", JSON + [("Origin", ALLOWED)], {"prompt": "x", "max_tokens": 1}, 200, None),
    ("OPTIONS", "/v1/chat/completions", [("Origin", ALLOWED), ("Access-Control-Request-Method", "POST"),
                                         ("Access-Control-Request-Headers", "authorization, content-type")],
     None, 204, None),
    ("OPTIONS", "/health", [("Origin", "http://evil.example"), ("Access-Control-Request-Method", "GET")],
     None, 403, "invalid_origin"),
    ("POST", "/v1/completions", JSON, {"prompt": "x", "model": "nope"}, 404, "model_not_found"),
    ("POST", "/v1/chat/completions", JSON, {"messages": CHAT, "model": "nope"}, 404, "model_not_found"),
    ("GET", "/v1/models/nope", AUTH, None, 404, "model_not_found"),
    ("GET", "/nope", AUTH, None, 404, None),
    ("PUT", "/v1/completions", JSON, {}, 405, None),
    ("GET", "/generate", AUTH, None, 405, None),
    ("POST", "/generate", JSON, {"prompt": "x" * 70000}, 413, "request_too_large"),
    ("POST", "/v1/completions", AUTH + [("Content-Type", "text/plain")], {"prompt": "x"}, 415,
     "unsupported_media_type"),
    ("POST", "/v1/chat/completions", AUTH, {"messages": CHAT}, 415, "unsupported_media_type"),
    ("GET", "/health", [("X-Big", "a" * 70000)], None, 431, "request_header_fields_too_large"),
]


def encode(body) -> bytes | None:
    if body is None or isinstance(body, bytes):
        return body
    return json.dumps(body).encode()


def error_code(r) -> str | None:
    return json.loads(r.body)["error"]["code"]


@pytest.mark.parametrize("case", CASES, ids=[f"{c[0]} {c[1]} {c[4]}" for c in CASES])
def test_response_matches_description(spec, server, case) -> None:
    method, path, headers, body, status, code = case
    r = request(server.addr, method, path, headers, encode(body))
    assert r.status == status, f"{method} {path}: {r.status} {r.body[:300]!r}"
    spec.check(method, path, r)
    if code is not None and method != "HEAD":
        assert error_code(r) == code
    if ("Origin", ALLOWED) in headers and status < 400:
        assert r.header("access-control-allow-origin") == ALLOWED


def test_health_while_loading_matches(spec, server) -> None:
    for r in server.early_health:
        spec.check("GET", "/health", r)


def test_incomplete_and_slow_bodies(spec, server) -> None:
    r = send_partial(server.addr, "/generate", JSON, b'{"prompt": ', 100, then_close=True)
    assert r.status == 400 and error_code(r) == "incomplete_body", r
    spec.check("POST", "/generate", r)
    t0 = time.monotonic()
    r = send_partial(server.addr, "/v1/completions", JSON, b'{"prompt": ', 100, then_close=False)
    assert r.status == 408 and error_code(r) == "timeout", r
    assert time.monotonic() - t0 < 20
    spec.check("POST", "/v1/completions", r)


def test_busy_server_answers_503_with_retry_after(spec, busy_server) -> None:
    """A stream holds the only place; a request meanwhile gets 503 server_busy."""
    body = json.dumps({"prompt": "In the beginning", "max_tokens": 4000, "ignore_eos": True, "stream": True}).encode()
    sock = connect(busy_server.addr)
    try:
        sock.sendall(head_bytes("POST", "/v1/completions", [("Content-Type", "application/json")], len(body)) + body)
        first = sock.recv(4096)  # the head and the first event: the sequence runs
        assert first.startswith(b"HTTP/1.1 200"), first[:200]
        for path, b in [("/v1/completions", {"prompt": "x"}), ("/v1/chat/completions", {"messages": CHAT}),
                        ("/generate", {"prompt": "x"})]:
            r = request(busy_server.addr, "POST", path, [("Content-Type", "application/json")], encode(b))
            assert r.status == 503 and error_code(r) == "server_busy", r
            assert r.header("retry-after") == "1"
            spec.check("POST", path, r)
    finally:
        sock.close()
    # The place comes back once the client has gone (the sequence is cancelled at its next step).
    t0 = time.monotonic()
    while True:
        r = request(busy_server.addr, "POST", "/generate", [("Content-Type", "application/json")],
                    encode({"prompt": "x", "max_tokens": 1}))
        if r.status == 200 or time.monotonic() - t0 > 30:
            break
        time.sleep(0.05)
    assert r.status == 200, r
