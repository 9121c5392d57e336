"""The requests of bench/soak.py and how each answer is judged.

Every request kind is a function `(client, rng) -> Outcome`. An outcome is `ok` (a 2xx whose
body or SSE stream has the documented shape), `expected` (the documented 4xx / 503 for that
kind of request), `disconnect` (the client hung up on purpose) or `unexpected` (a 5xx, a wrong
status, a malformed body or stream, a connection error the client did not cause, a hang).
Python 3 standard library only.
"""
from __future__ import annotations

import http.client
import json
import random
import socket
import threading
import time
from dataclasses import dataclass, field

WORDS = ("the river ran past old stone walls while birds sang over quiet fields and a small "
         "boat drifted toward the harbour lights under a pale evening sky").split()

# 503 answers that mean "full, retry later": every generating request may get one under load.
BUSY_CODES = ("server_busy", "kv_budget_exhausted")
FINISH_OPENAI = ("stop", "length")
FINISH_SIMPLE = ("stop", "length", "context")


@dataclass
class Outcome:
    kind: str
    verdict: str  # ok | expected | disconnect | unexpected
    status: int | None = None
    reason: str = ""
    detail: str = ""


class Unexpected(Exception):
    """A response that breaks the documented contract (reason, detail)."""

    def __init__(self, reason: str, detail: str = ""):
        super().__init__(reason)
        self.reason, self.detail = reason, detail[:300]


@dataclass
class Client:
    host: str
    port: int
    timeout: float  # longest a request may take, end to end
    model_id: str = "model"
    max_request_tokens: int = 256
    stop: threading.Event = field(default_factory=threading.Event)

    def connect(self) -> http.client.HTTPConnection:
        return http.client.HTTPConnection(self.host, self.port, timeout=self.timeout)

    def send(self, method, path, body=None, ctype="application/json"):
        """One request on a fresh connection: (status, headers, body bytes)."""
        conn = self.connect()
        try:
            headers = {"Content-Type": ctype} if ctype and body is not None else {}
            if isinstance(body, (dict, list)):
                body = json.dumps(body)
            conn.request(method, path, body=body, headers=headers)
            resp = conn.getresponse()
            return resp.status, {k.lower(): v for k, v in resp.getheaders()}, resp.read()
        finally:
            conn.close()


def prompt_text(rng, lo=3, hi=24) -> str:
    return " ".join(rng.choice(WORDS) for _ in range(rng.randint(lo, hi)))


def parse_json(data: bytes) -> dict:
    try:
        v = json.loads(data)
    except ValueError as e:
        raise Unexpected("malformed JSON body", f"{e}: {data[:200]!r}")
    if not isinstance(v, dict):
        raise Unexpected("JSON body is not an object", repr(data[:200]))
    return v


def check_error_body(status: int, data: bytes) -> None:
    err = parse_json(data).get("error")
    if not isinstance(err, dict) or not isinstance(err.get("message"), str) or "type" not in err:
        raise Unexpected(f"{status} without the documented error object", repr(data[:200]))


def busy(status: int, headers: dict, data: bytes) -> bool:
    """A 503 'full, retry later' with Retry-After and its error object."""
    if status != 503:
        return False
    check_error_body(status, data)
    code = parse_json(data)["error"].get("code")
    if code not in BUSY_CODES:
        raise Unexpected(f"503 with code {code!r}", repr(data[:200]))
    if "retry-after" not in headers:
        raise Unexpected("503 without Retry-After")
    return True


def wrong_status(status: int, data: bytes, want: str) -> Unexpected:
    return Unexpected(f"status {status} (want {want})", data[:300].decode("utf-8", "replace"))


# ---- whole (non-stream) generations -------------------------------------------------------

def check_usage(v: dict, max_tokens: int) -> None:
    u = v.get("usage")
    if not isinstance(u, dict) or not isinstance(u.get("completion_tokens"), int):
        raise Unexpected("no usage object", json.dumps(v)[:300])
    if u["completion_tokens"] > max_tokens or u.get("prompt_tokens", 0) < 1:
        raise Unexpected("usage out of range", json.dumps(u))


def check_completion(v: dict, max_tokens: int) -> None:
    ch = v.get("choices")
    if v.get("object") != "text_completion" or not isinstance(ch, list) or len(ch) != 1:
        raise Unexpected("completion without one choice", json.dumps(v)[:300])
    if not isinstance(ch[0].get("text"), str) or ch[0].get("finish_reason") not in FINISH_OPENAI:
        raise Unexpected("completion choice malformed", json.dumps(ch[0])[:300])
    check_usage(v, max_tokens)


def check_chat(v: dict, max_tokens: int) -> None:
    ch = v.get("choices")
    if v.get("object") != "chat.completion" or not isinstance(ch, list) or len(ch) != 1:
        raise Unexpected("chat completion without one choice", json.dumps(v)[:300])
    msg = ch[0].get("message") or {}
    if msg.get("role") != "assistant" or not isinstance(msg.get("content"), str):
        raise Unexpected("chat message malformed", json.dumps(ch[0])[:300])
    if ch[0].get("finish_reason") not in FINISH_OPENAI:
        raise Unexpected("chat finish_reason malformed", json.dumps(ch[0])[:300])
    check_usage(v, max_tokens)


def check_generate(v: dict, max_tokens: int) -> None:
    toks = v.get("tokens")
    if not isinstance(v.get("text"), str) or not isinstance(toks, list):
        raise Unexpected("/generate body malformed", json.dumps(v)[:300])
    if v.get("completion_tokens") != len(toks) or len(toks) > max_tokens:
        raise Unexpected("/generate token count wrong", json.dumps(v)[:300])
    if v.get("finish_reason") not in FINISH_SIMPLE or not isinstance(v.get("prompt_tokens"), int):
        raise Unexpected("/generate finish_reason or prompt_tokens malformed", json.dumps(v)[:300])


def completion_body(c: Client, rng, stream=False) -> tuple[dict, int]:
    n = rng.randint(4, 32)
    body = {"prompt": prompt_text(rng), "max_tokens": n, "temperature": rng.choice([0, 0.7, 1.0]),
            "seed": rng.randrange(1 << 31)}
    if rng.random() < 0.3:
        body["model"] = c.model_id
    if stream:
        body["stream"] = True
        if rng.random() < 0.5:
            body["stream_options"] = {"include_usage": True}
    return body, n


def chat_body(c: Client, rng, stream=False) -> tuple[dict, int]:
    n = rng.randint(4, 32)
    msgs = [{"role": "user", "content": prompt_text(rng)}]
    if rng.random() < 0.3:
        msgs.insert(0, {"role": "system", "content": "Be brief."})
    body = {"messages": msgs, "max_tokens": n, "top_p": 0.9, "seed": rng.randrange(1 << 31)}
    if stream:
        body["stream"] = True
    return body, n


def whole(kind, path, make, check):
    def run(c: Client, rng) -> Outcome:
        body, n = make(c, rng)
        status, headers, data = c.send("POST", path, body)
        if busy(status, headers, data):
            return Outcome(kind, "expected", status, "busy")
        if status != 200:
            raise wrong_status(status, data, "200 or 503")
        check(parse_json(data), n)
        return Outcome(kind, "ok", status)
    return run


completion = whole("completion", "/v1/completions", completion_body, check_completion)
chat = whole("chat", "/v1/chat/completions", chat_body, check_chat)
generate = whole(
    "generate", "/generate",
    lambda c, rng: (lambda n: ({"prompt": prompt_text(rng), "max_tokens": n, "seed": rng.randrange(1 << 31)}, n))(
        rng.randint(4, 32)),
    check_generate)


# ---- streams ------------------------------------------------------------------------------

def sse_events(resp, deadline: float):
    """The `data:` payloads of an SSE body, as they arrive (comments skipped)."""
    data: list[str] = []
    while True:
        if time.monotonic() > deadline:
            raise Unexpected("stream hung past the timeout")
        line = resp.readline()
        if not line:
            if data:
                raise Unexpected("stream ended inside an event", "\n".join(data)[:300])
            return
        if not line.endswith(b"\n"):
            raise Unexpected("stream ended inside a line", repr(line[:200]))
        text = line.decode("utf-8").rstrip("\r\n")
        if text == "":
            if data:
                yield "\n".join(data)
                data = []
        elif text.startswith(":"):
            continue
        elif text.startswith("data: "):
            data.append(text[6:])
        else:
            raise Unexpected("stream line is neither data nor a comment", text[:200])


def check_stream(resp, is_chat: bool, max_tokens: int, deadline: float) -> None:
    """A whole SSE stream: JSON chunks, one finish_reason, then [DONE], then the end."""
    finishes, chunks, done, first = 0, 0, False, True
    for payload in sse_events(resp, deadline):
        if done:
            raise Unexpected("data after [DONE]", payload[:200])
        if payload == "[DONE]":
            done = True
            continue
        try:
            v = json.loads(payload)
        except ValueError:
            raise Unexpected("stream chunk is not JSON", payload[:200])
        if "error" in v:
            raise Unexpected("error event in stream", payload[:300])
        want = "chat.completion.chunk" if is_chat else "text_completion"
        if v.get("object") != want or not isinstance(v.get("choices"), list):
            raise Unexpected("stream chunk malformed", payload[:300])
        if is_chat and first and (v["choices"] or [{}])[0].get("delta", {}).get("role") != "assistant":
            raise Unexpected("first chat chunk has no role", payload[:300])
        first = False
        for ch in v["choices"]:
            chunks += 1
            if ch.get("finish_reason") is not None:
                finishes += 1
                if ch["finish_reason"] not in FINISH_OPENAI:
                    raise Unexpected("stream finish_reason malformed", payload[:300])
    if not done:
        raise Unexpected("stream without [DONE]")
    if finishes != 1 or chunks > max_tokens + 3:
        raise Unexpected(f"stream with {finishes} finish_reasons and {chunks} chunks")


def open_stream(c: Client, path: str, body: dict):
    conn = c.connect()
    conn.request("POST", path, body=json.dumps(body), headers={"Content-Type": "application/json"})
    return conn, conn.getresponse()


def streamed(kind, path, make, is_chat):
    def run(c: Client, rng) -> Outcome:
        body, n = make(c, rng, stream=True)
        deadline = time.monotonic() + c.timeout
        conn, resp = open_stream(c, path, body)
        try:
            if resp.status != 200:
                data = resp.read()
                if busy(resp.status, {k.lower(): v for k, v in resp.getheaders()}, data):
                    return Outcome(kind, "expected", resp.status, "busy")
                raise wrong_status(resp.status, data, "200 or 503")
            if not (resp.getheader("Content-Type") or "").startswith("text/event-stream"):
                raise Unexpected("stream without text/event-stream", resp.getheader("Content-Type") or "")
            check_stream(resp, is_chat, n, deadline)
            return Outcome(kind, "ok", 200)
        finally:
            conn.close()
    return run


completion_stream = streamed("completion_stream", "/v1/completions", completion_body, False)
chat_stream = streamed("chat_stream", "/v1/chat/completions", chat_body, True)


def disconnect(c: Client, rng) -> Outcome:
    """Hang up: mid-stream after the first event, or right after sending (maybe still queued)."""
    is_chat = rng.random() < 0.5
    path = "/v1/chat/completions" if is_chat else "/v1/completions"
    body, _ = (chat_body if is_chat else completion_body)(c, rng, stream=True)
    body["max_tokens"], body["ignore_eos"] = rng.randint(32, 64), True
    conn = c.connect()
    try:
        conn.request("POST", path, body=json.dumps(body), headers={"Content-Type": "application/json"})
        if rng.random() < 0.3:
            time.sleep(rng.random() * 0.05)
            return Outcome("disconnect", "disconnect", None, "before the response")
        resp = conn.getresponse()
        if resp.status != 200:
            data = resp.read()
            if busy(resp.status, {k.lower(): v for k, v in resp.getheaders()}, data):
                return Outcome("disconnect", "expected", resp.status, "busy")
            raise wrong_status(resp.status, data, "200 or 503")
        events = sse_events(resp, time.monotonic() + c.timeout)
        for _ in range(rng.randint(1, 4)):
            payload = next(events, None)
            if payload == "[DONE]":  # a short generation (a stop string) ended first
                return Outcome("disconnect", "ok", 200, "finished before the hang-up")
            if payload is None:
                raise Unexpected("stream ended without [DONE] before the client hung up")
            if '"error"' in payload:
                raise Unexpected("error event in stream", payload[:300])
        return Outcome("disconnect", "disconnect", 200, "mid-stream")
    finally:
        try:
            if conn.sock is not None:
                conn.sock.shutdown(socket.SHUT_RDWR)
        except OSError:
            pass  # already gone: the hang-up was ours either way
        conn.close()


# ---- requests that must be refused --------------------------------------------------------

def overlong(c: Client, rng) -> Outcome:
    """Prompts past --max-request-tokens, past the prompt byte cap, or max_tokens past the cap:
    400 (never 503: the request is refused before it is queued)."""
    many = " ".join(rng.choice(WORDS) for _ in range(c.max_request_tokens * 2))
    variants = [
        ("/v1/completions", {"prompt": many, "max_tokens": 4}),
        ("/v1/completions", {"prompt": "x" * 200_000, "max_tokens": 4}),
        ("/v1/completions", {"prompt": "hello", "max_tokens": c.max_request_tokens * 4}),
        ("/v1/chat/completions", {"messages": [{"role": "user", "content": many}], "max_tokens": 4}),
        ("/v1/chat/completions", {"messages": [{"role": "user", "content": "hi"}],
                                  "max_tokens": c.max_request_tokens * 4}),
        ("/generate", {"prompt": many, "max_tokens": 4}),
        ("/generate", {"prompt": "x" * 200_000}),
    ]
    path, body = rng.choice(variants)
    status, _, data = c.send("POST", path, body)
    if status != 400:
        raise wrong_status(status, data, "400")
    check_error_body(status, data)
    return Outcome("overlong", "expected", status, "400")


def bad_variants():
    """(path, method, body, content type, wanted status)."""
    j = "application/json"
    return [
        ("/v1/completions", "POST", '{"prompt": "x", "max_tokens": ', j, 400),
        ("/v1/chat/completions", "POST", '{"messages": [}', j, 400),
        ("/generate", "POST", "not json at all", j, 400),
        ("/generate", "POST", "[1, 2, 3]", j, 400),
        ("/v1/completions", "POST", {"prompt": 5}, j, 400),
        ("/v1/completions", "POST", {"prompt": "x", "max_tokens": "ten"}, j, 400),
        ("/v1/completions", "POST", {"prompt": "x", "temperature": -1}, j, 400),
        ("/v1/chat/completions", "POST", {"messages": "hello"}, j, 400),
        ("/v1/chat/completions", "POST", {"messages": [{"role": "user", "content": 7}]}, j, 400),
        ("/generate", "POST", {"prompt": ["a"]}, j, 400),
        ("/generate", "POST", {"prompt": "x", "top_p": 0}, j, 400),
        ("/v1/completions", "POST", {"prompt": "x", "frobnicate": 1}, j, 400),
        ("/v1/chat/completions", "POST", {"messages": [{"role": "user", "content": "x"}], "tools": [{}]}, j, 400),
        ("/v1/completions", "POST", {"prompt": "x", "model": "no-such-model"}, j, 404),
        ("/v1/completions", "POST", {"prompt": "x"}, "text/plain", 415),
        ("/generate", "POST", '{"prompt": "x"}', None, 415),
        ("/v1/chat/completions", "POST", {"messages": []}, "application/x-www-form-urlencoded", 415),
        ("/v1/completions", "GET", None, None, 405),
        ("/v1/nothing-here", "POST", {"prompt": "x"}, j, 404),
    ]


def bad(c: Client, rng) -> Outcome:
    path, method, body, ctype, want = rng.choice(bad_variants())
    status, _, data = c.send(method, path, body, ctype)
    if status != want:
        raise wrong_status(status, data, str(want))
    check_error_body(status, data)
    return Outcome("bad", "expected", status, str(status))


def info(c: Client, rng) -> Outcome:
    path = rng.choice(["/health", "/v1/models", "/metrics"])
    status, _, data = c.send("GET", path)
    if status != 200:
        raise wrong_status(status, data, "200")
    if path == "/v1/models" and not parse_json(data).get("data"):
        raise Unexpected("/v1/models without data", data[:200].decode("utf-8", "replace"))
    return Outcome("info", "ok", status)


# Weights of the mixed load each client thread draws from.
MIX = [
    (completion, 14), (completion_stream, 14), (chat, 12), (chat_stream, 12), (generate, 12),
    (disconnect, 10), (overlong, 8), (bad, 12), (info, 6),
]


def guarded(kind: str, fn, c: Client, rng) -> Outcome:
    """Run one request; turn contract breaks, connection errors and hangs into outcomes."""
    start = time.monotonic()
    try:
        out = fn(c, rng)
    except Unexpected as e:
        return Outcome(kind, "unexpected", None, e.reason, e.detail)
    except (socket.timeout, TimeoutError) as e:
        return Outcome(kind, "unexpected", None, "hang: no answer within the timeout", repr(e))
    except (OSError, http.client.HTTPException) as e:
        return Outcome(kind, "unexpected", None, f"connection error {type(e).__name__}", repr(e))
    except UnicodeDecodeError as e:
        return Outcome(kind, "unexpected", None, "body is not UTF-8", repr(e))
    if time.monotonic() - start > c.timeout:
        return Outcome(kind, "unexpected", out.status, "hang: answered after the timeout")
    return out


def kind_of(fn) -> str:
    names = {completion: "completion", completion_stream: "completion_stream", chat: "chat",
             chat_stream: "chat_stream", generate: "generate", disconnect: "disconnect",
             overlong: "overlong", bad: "bad", info: "info"}
    return names[fn]


def client_loop(c: Client, rng, record) -> None:
    """One client thread: draw a request kind, send it, record the outcome, pause a little."""
    fns, weights = zip(*MIX)
    while not c.stop.is_set():
        fn = rng.choices(fns, weights)[0]
        record(guarded(kind_of(fn), fn, c, rng))
        c.stop.wait(rng.random() * 0.2)


def burst(c: Client, rng, size: int, record) -> int:
    """`size` completions at once (past --parallel + --queue): each 200 or 503. Returns how many
    got 503."""
    outs: list[Outcome] = []
    lock = threading.Lock()

    def one(seed):
        out = guarded("burst", completion, c, random.Random(seed))
        with lock:
            outs.append(out)

    threads = [threading.Thread(target=one, args=(rng.randrange(1 << 30),)) for _ in range(size)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    for o in outs:
        o.kind = "burst"
        record(o)
    return sum(1 for o in outs if o.status == 503)
