#!/usr/bin/env python3
"""colibri behind WSGI: ``POST /generate`` exactly as docs/api.md describes.

Run it with the standard library's server::

    python colibri_wsgi.py MODEL.colibri --port 8080        # or COLIBRI_MODEL=... python colibri_wsgi.py
    curl -s localhost:8080/generate -H 'Content-Type: application/json' \\
         -d '{"prompt": "In the beginning", "max_tokens": 16, "temperature": 0}'

or under any WSGI server (the model comes from ``$COLIBRI_MODEL``; ``$COLIBRI_SESSIONS`` sessions,
default 1, ``$COLIBRI_CTX`` context tokens, ``$COLIBRI_MAX_BODY`` body cap in bytes)::

    gunicorn --threads 4 'colibri_wsgi:application'

The model is loaded once per process. Requests share a small pool of sessions (default one): a
request takes a session (waiting if all are busy), resets it, generates, and puts it back, so the
pool size is the number of generations running at once (ctypes releases the GIL).
"""

from __future__ import annotations

import argparse
import json
import math
import os
import queue
import socketserver
import sys
import threading
from typing import Any, Callable, Dict, Iterable, List, Optional, Tuple
from wsgiref.simple_server import WSGIRequestHandler, WSGIServer, make_server

try:
    import colibri
except ImportError:  # running from a source checkout: python/examples/ -> python/
    sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))
    import colibri

StartResponse = Callable[..., Any]
Environ = Dict[str, Any]

#: Default body cap (bytes); larger bodies get 413.
DEFAULT_MAX_BODY = 1 << 20
INT32_MAX = 2**31 - 1
UINT64_MAX = 2**64 - 1

DEFAULTS = {
    "max_tokens": 64,
    "temperature": 0.8,
    "top_k": 40,
    "top_p": 0.95,
    "min_p": 0.05,
    "repetition_penalty": 1.0,
    "seed": 0,
    "ignore_eos": False,
}

#: The binding's finish reasons in docs/api.md's words ("stop": the model ended the text, as the
#: Rust and C hosts say; "context": the context filled up).
API_FINISH = {"length": "length", "eos": "stop", "stop": "stop", "callback": "stop", "context_full": "context"}


class BadRequest(Exception):
    """A 4xx answer: status line, message and the offending field (or None)."""

    def __init__(self, status: str, message: str, param: Optional[str] = None) -> None:
        super().__init__(message)
        self.status = status
        self.message = message
        self.param = param


def _invalid(message: str, param: Optional[str]) -> BadRequest:
    return BadRequest("400 Bad Request", message, param)


def _reject_constant(name: str) -> Any:
    raise ValueError(f"{name} is not valid JSON")


def _integer(body: Dict[str, Any], name: str, lo: int, hi: int) -> int:
    v = body.get(name, DEFAULTS[name])
    if isinstance(v, bool) or not isinstance(v, int):
        raise _invalid(f"'{name}' must be an integer", name)
    if v < lo or v > hi:
        raise _invalid(f"'{name}' must be in [{lo}, {hi}], got {v}", name)
    return v


def _number(body: Dict[str, Any], name: str, ok: Callable[[float], bool], rule: str) -> float:
    v = body.get(name, DEFAULTS[name])
    if isinstance(v, bool) or not isinstance(v, (int, float)):
        raise _invalid(f"'{name}' must be a number", name)
    f = float(v)
    if not math.isfinite(f) or not ok(f):
        raise _invalid(f"'{name}' must be {rule}, got {v}", name)
    return f


def parse_request(raw: bytes) -> Dict[str, Any]:
    """The validated fields of a /generate body (BadRequest on any violation)."""
    try:
        body = json.loads(raw, parse_constant=_reject_constant) if raw else None
    except (ValueError, RecursionError) as e:
        raise _invalid(f"the body is not valid JSON: {e}", None) from None
    if not isinstance(body, dict):
        raise _invalid("the body must be a JSON object", None)
    if "prompt" not in body:
        raise _invalid("'prompt' is required", "prompt")
    if not isinstance(body["prompt"], str):
        raise _invalid("'prompt' must be a string", "prompt")
    ignore_eos = body.get("ignore_eos", DEFAULTS["ignore_eos"])
    if not isinstance(ignore_eos, bool):
        raise _invalid("'ignore_eos' must be a boolean", "ignore_eos")
    return {
        "prompt": body["prompt"],
        "max_tokens": _integer(body, "max_tokens", 0, sys.maxsize),
        "temperature": _number(body, "temperature", lambda f: f >= 0, "≥ 0"),
        "top_k": _integer(body, "top_k", 0, sys.maxsize),
        "top_p": _number(body, "top_p", lambda f: 0 < f <= 1, "in (0, 1]"),
        "min_p": _number(body, "min_p", lambda f: 0 <= f <= 1, "in [0, 1]"),
        "repetition_penalty": _number(body, "repetition_penalty", lambda f: f > 0, "> 0"),
        "seed": _integer(body, "seed", 0, UINT64_MAX),
        "ignore_eos": ignore_eos,
    }


class GenerateApp:
    """The WSGI application. ``GenerateApp(model_or_path, sessions=1, n_ctx=0,
    max_body=DEFAULT_MAX_BODY)``; call ``close()`` to free the sessions (and the model if the app
    opened it)."""

    def __init__(
        self,
        model: Any,
        sessions: int = 1,
        n_ctx: int = 0,
        max_body: int = DEFAULT_MAX_BODY,
    ) -> None:
        if sessions < 1:
            raise ValueError("sessions must be ≥ 1")
        self._owns_model = not isinstance(model, colibri.Model)
        self.model: colibri.Model = colibri.Model(model) if self._owns_model else model
        self.n_ctx = n_ctx
        self.max_body = max_body
        self._pool: "queue.Queue[colibri.Session]" = queue.Queue()
        self._all: List[colibri.Session] = []
        self._lock = threading.Lock()
        for _ in range(sessions):
            self._pool.put(self._new_session())

    def _new_session(self) -> colibri.Session:
        s = self.model.session(n_ctx=self.n_ctx)
        with self._lock:
            self._all.append(s)
        return s

    def close(self) -> None:
        with self._lock:
            sessions, self._all = self._all, []
        for s in sessions:
            s.close()
        if self._owns_model:
            self.model.close()

    # -- WSGI --------------------------------------------------------------------------------

    def __call__(self, environ: Environ, start_response: StartResponse) -> Iterable[bytes]:
        try:
            if environ.get("PATH_INFO", "") != "/generate":
                raise BadRequest("404 Not Found", f"no route for {environ.get('PATH_INFO', '')!r}; use POST /generate")
            if environ.get("REQUEST_METHOD", "GET").upper() != "POST":
                raise BadRequest("405 Method Not Allowed", "use POST on /generate")
            # Web pages cannot use it: a browser lets any page POST text/plain to localhost.
            if environ.get("HTTP_ORIGIN"):
                raise BadRequest("403 Forbidden", "cross-origin requests are refused")
            if environ.get("CONTENT_TYPE", "").split(";")[0].strip().lower() != "application/json":
                raise BadRequest("415 Unsupported Media Type", "send the body with Content-Type: application/json")
            req = parse_request(self._read_body(environ))
            status, payload = "200 OK", self.generate(req)
        except BadRequest as e:
            status, payload = e.status, _error(e.message, "invalid_request_error", e.param)
        except colibri.ColibriError as e:
            status, payload = "500 Internal Server Error", _error(str(e), "server_error", None)
        body = json.dumps(payload).encode("utf-8")
        headers: List[Tuple[str, str]] = [
            ("Content-Type", "application/json"),
            ("Content-Length", str(len(body))),
        ]
        if status.startswith("405"):
            headers.append(("Allow", "POST"))
        start_response(status, headers)
        return [body]

    def _read_body(self, environ: Environ) -> bytes:
        raw_len = environ.get("CONTENT_LENGTH") or "0"
        try:
            length = int(raw_len)
        except ValueError:
            raise _invalid(f"bad Content-Length {raw_len!r}", None) from None
        if length < 0:
            raise _invalid(f"bad Content-Length {raw_len!r}", None)
        if length > self.max_body:
            raise BadRequest(
                "413 Payload Too Large", f"the body has {length} bytes; this server accepts at most {self.max_body}"
            )
        stream = environ.get("wsgi.input")
        if length == 0 or stream is None:
            return b""
        data = stream.read(length)
        return data if isinstance(data, bytes) else bytes(data)

    def generate(self, req: Dict[str, Any]) -> Dict[str, Any]:
        """Run one validated request on a pooled session."""
        s = self._pool.get()
        broken = False
        try:
            try:
                ids = self.model.tokenize(req["prompt"], add_special=True)
            except (ValueError, UnicodeError) as e:
                raise _invalid(f"'prompt' cannot be tokenised: {e}", "prompt") from None
            if not ids:
                raise _invalid("'prompt' encodes to no tokens", "prompt")
            n_ctx = s.n_ctx
            if len(ids) >= n_ctx:
                raise _invalid(f"'prompt' has {len(ids)} tokens; the context holds {n_ctx}", "prompt")
            s.reset()
            try:
                r = s.complete(
                    ids,
                    max_tokens=min(req["max_tokens"], n_ctx, INT32_MAX),
                    temperature=req["temperature"],
                    top_k=min(req["top_k"], INT32_MAX),
                    top_p=req["top_p"],
                    min_p=req["min_p"],
                    repetition_penalty=req["repetition_penalty"],
                    seed=req["seed"],
                    ignore_eos=req["ignore_eos"],
                )
            except colibri.ColibriError as e:
                if e.status == colibri.Status.INVALID_ARGUMENT:
                    raise _invalid(e.message, None) from None
                broken = e.status == colibri.Status.PANIC
                raise
            return {
                "text": r.text,
                "tokens": r.tokens,
                "prompt_tokens": len(ids),
                "completion_tokens": len(r.tokens),
                "finish_reason": API_FINISH.get(r.finish_reason, "stop"),
            }
        finally:
            if broken:  # the library asks for the object a panic hit to be freed
                with self._lock:
                    if s in self._all:
                        self._all.remove(s)
                s.close()
                s = self._new_session()
            self._pool.put(s)


def _error(message: str, type_: str, param: Optional[str]) -> Dict[str, Any]:
    return {"error": {"message": message, "type": type_, "param": param, "code": None}}


def make_app(model: Any, sessions: int = 1, n_ctx: int = 0, max_body: int = DEFAULT_MAX_BODY) -> GenerateApp:
    """A :class:`GenerateApp` for a model path or an open :class:`colibri.Model`."""
    return GenerateApp(model, sessions=sessions, n_ctx=n_ctx, max_body=max_body)


# For WSGI servers (`colibri_wsgi:application`): the app is built from the environment on the
# first request, once per process.
_default: Optional[GenerateApp] = None
_default_lock = threading.Lock()


def application(environ: Environ, start_response: StartResponse) -> Iterable[bytes]:
    global _default
    if _default is None:
        with _default_lock:
            if _default is None:
                path = os.environ.get("COLIBRI_MODEL")
                if not path:
                    raise RuntimeError("set COLIBRI_MODEL to the .colibri file to serve")
                _default = make_app(
                    path,
                    sessions=int(os.environ.get("COLIBRI_SESSIONS", "1")),
                    n_ctx=int(os.environ.get("COLIBRI_CTX", "0")),
                    max_body=int(os.environ.get("COLIBRI_MAX_BODY", str(DEFAULT_MAX_BODY))),
                )
    return _default(environ, start_response)


class ThreadingWSGIServer(socketserver.ThreadingMixIn, WSGIServer):
    daemon_threads = True


class QuietHandler(WSGIRequestHandler):
    def log_message(self, format: str, *args: Any) -> None:  # noqa: A002 - stdlib signature
        if os.environ.get("COLIBRI_WSGI_LOG", "1") != "0":
            super().log_message(format, *args)


def main(argv: Optional[List[str]] = None) -> int:
    ap = argparse.ArgumentParser(description="Serve POST /generate (docs/api.md) with wsgiref.")
    ap.add_argument("model", nargs="?", default=os.environ.get("COLIBRI_MODEL"),
                    help="the .colibri file (default: $COLIBRI_MODEL)")
    ap.add_argument("--port", "-p", type=int, default=8080, help="TCP port (0: any free port; default 8080)")
    ap.add_argument("--host", default="127.0.0.1", help="address to bind (default 127.0.0.1)")
    ap.add_argument("--sessions", type=int, default=1, help="concurrent generations (default 1)")
    ap.add_argument("--ctx", type=int, default=0, help="context tokens per session (0: the model's, ≤ 4096)")
    ap.add_argument("--max-body", type=int, default=DEFAULT_MAX_BODY, help="body cap in bytes (413 above)")
    a = ap.parse_args(argv)
    if not a.model:
        ap.error("give the model path or set COLIBRI_MODEL")
    app = make_app(a.model, sessions=a.sessions, n_ctx=a.ctx, max_body=a.max_body)
    with make_server(a.host, a.port, app, server_class=ThreadingWSGIServer, handler_class=QuietHandler) as httpd:
        print(f"colibri_wsgi: serving {a.model} on http://{a.host}:{httpd.server_port}/generate",
              file=sys.stderr, flush=True)
        try:
            httpd.serve_forever()
        except KeyboardInterrupt:
            pass
    app.close()
    return 0


if __name__ == "__main__":
    sys.exit(main())
