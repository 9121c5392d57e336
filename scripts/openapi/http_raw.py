"""A tiny HTTP/1.1 client over a socket, for requests a normal client will not send (two Host
headers, a 70 KiB head, a body cut short or sent slowly) and for reading every response whole:
status, headers (a list: names may repeat) and body (Content-Length, chunked, or up to EOF)."""

from __future__ import annotations

import socket
import time
from dataclasses import dataclass, field
from typing import List, Optional, Tuple

TIMEOUT = 60.0


@dataclass
class Response:
    status: int
    headers: List[Tuple[str, str]] = field(default_factory=list)
    body: bytes = b""

    def header(self, name: str) -> Optional[str]:
        for k, v in self.headers:
            if k.lower() == name.lower():
                return v
        return None

    @property
    def content_type(self) -> str:
        return (self.header("content-type") or "").split(";")[0].strip().lower()


class _Reader:
    def __init__(self, sock: socket.socket) -> None:
        self.sock = sock
        self.buf = b""

    def _fill(self) -> bool:
        data = self.sock.recv(65536)
        self.buf += data
        return bool(data)

    def line(self) -> bytes:
        while b"\r\n" not in self.buf:
            if not self._fill():
                raise ConnectionError(f"connection closed mid-line: {self.buf[:200]!r}")
        line, self.buf = self.buf.split(b"\r\n", 1)
        return line

    def exact(self, n: int) -> bytes:
        while len(self.buf) < n:
            if not self._fill():
                raise ConnectionError(f"connection closed after {len(self.buf)} of {n} bytes")
        out, self.buf = self.buf[:n], self.buf[n:]
        return out

    def rest(self) -> bytes:
        while self._fill():
            pass
        out, self.buf = self.buf, b""
        return out


def read_response(sock: socket.socket, head_only: bool = False) -> Response:
    r = _Reader(sock)
    status_line = r.line().decode("latin-1")
    parts = status_line.split(" ", 2)
    if len(parts) < 2 or not parts[1].isdigit():
        raise ConnectionError(f"bad status line {status_line!r}")
    headers = []
    while True:
        line = r.line().decode("latin-1")
        if not line:
            break
        k, _, v = line.partition(":")
        headers.append((k.strip(), v.strip()))
    resp = Response(int(parts[1]), headers)
    length = resp.header("content-length")
    if head_only or resp.status in (204, 304):
        return resp
    if "chunked" in (resp.header("transfer-encoding") or "").lower():
        body = b""
        while True:
            size = int(r.line().split(b";")[0].strip(), 16)
            body += r.exact(size)
            r.line()
            if size == 0:
                break
        resp.body = body
    elif length is not None:
        resp.body = r.exact(int(length))
    else:
        resp.body = r.rest()
    return resp


def connect(addr: str) -> socket.socket:
    host, port = addr.rsplit(":", 1)
    sock = socket.create_connection((host, int(port)), timeout=TIMEOUT)
    sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
    return sock


def head_bytes(method: str, path: str, headers: List[Tuple[str, str]], body_len: Optional[int]) -> bytes:
    lines = [f"{method} {path} HTTP/1.1", "Connection: close"]
    if not any(k.lower() == "host" for k, _ in headers):
        lines.append("Host: localhost")
    if body_len is not None:
        lines.append(f"Content-Length: {body_len}")
    lines += [f"{k}: {v}" for k, v in headers]
    return ("\r\n".join(lines) + "\r\n\r\n").encode("latin-1")


def request(
    addr: str,
    method: str,
    path: str,
    headers: Optional[List[Tuple[str, str]]] = None,
    body: Optional[bytes] = None,
) -> Response:
    """One request on its own connection (Connection: close)."""
    headers = list(headers or [])
    with connect(addr) as sock:
        sock.sendall(head_bytes(method, path, headers, None if body is None else len(body)))
        if body:
            try:
                sock.sendall(body)
            except OSError:
                pass  # the server may answer (413) before reading it all
        return read_response(sock, head_only=method == "HEAD")


def send_partial(addr: str, path: str, headers: List[Tuple[str, str]], body: bytes, claimed: int,
                 then_close: bool, pause: float = 0.0) -> Response:
    """POST claiming `claimed` body bytes but sending only `body`; then close the writing half
    (a body cut short) or wait (a slow body)."""
    with connect(addr) as sock:
        sock.sendall(head_bytes("POST", path, headers, claimed) + body)
        if then_close:
            sock.shutdown(socket.SHUT_WR)
        elif pause:
            time.sleep(pause)
        return read_response(sock)
