#!/usr/bin/env python3
"""Load figures for `colibri serve` (a measurement, not a test): for each client count, C
threads each send N non-streaming /v1/completions requests back to back; reports QPS, p50/p95
latency and aggregate generated tokens/s. With --compare it runs the same load against a server
started with --parallel 1 (one-at-a-time serving) and one with --parallel P, and prints the
batched/serial aggregate tokens/s ratio.

    scripts/serve-load.py [-m MODEL] [--clients 1,4,8,16] [--requests 8] [--max-tokens 64]
                          [--parallel 16] [--compare] [-t THREADS]

Uses target/release/colibri; loopback only.
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import threading
import time
import urllib.request
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
CLI = REPO / "target" / "release" / "colibri"


def start(model: str | None, parallel: int, threads: int | None) -> tuple[subprocess.Popen, str]:
    cmd = [str(CLI), "serve", "--port", "0", "--parallel", str(parallel), "--queue", "256"]
    if model:
        cmd += ["-m", model]
    if threads:
        cmd += ["-t", str(threads)]
    proc = subprocess.Popen(cmd, stderr=subprocess.PIPE, stdout=subprocess.DEVNULL, text=True)
    assert proc.stderr is not None
    addr = ""
    for line in proc.stderr:
        if line.startswith("listening on http://"):
            addr = line.split("http://", 1)[1].strip()
        if line.startswith("model ") and "ready" in line:
            break
    threading.Thread(target=proc.stderr.read, daemon=True).start()
    return proc, addr


def one(addr: str, i: int, max_tokens: int) -> tuple[float, int]:
    body = json.dumps({"prompt": f"And it came to pass {i}", "max_tokens": max_tokens, "ignore_eos": True,
                       "temperature": 0.8, "seed": i}).encode()
    req = urllib.request.Request(f"http://{addr}/v1/completions", body, {"Content-Type": "application/json"})
    t0 = time.perf_counter()
    with urllib.request.urlopen(req, timeout=600) as r:
        out = json.load(r)
    return time.perf_counter() - t0, out["usage"]["completion_tokens"]


def load(addr: str, clients: int, requests: int, max_tokens: int) -> dict:
    lat: list[float] = []
    toks = [0]
    lock = threading.Lock()

    def worker(c: int) -> None:
        for k in range(requests):
            dt, n = one(addr, c * 1000 + k, max_tokens)
            with lock:
                lat.append(dt)
                toks[0] += n

    t0 = time.perf_counter()
    ts = [threading.Thread(target=worker, args=(c,)) for c in range(clients)]
    for t in ts:
        t.start()
    for t in ts:
        t.join()
    wall = time.perf_counter() - t0
    lat.sort()
    return {
        "clients": clients,
        "requests": len(lat),
        "qps": len(lat) / wall,
        "p50_s": statistics.median(lat),
        "p95_s": lat[min(len(lat) - 1, int(0.95 * len(lat)))],
        "tokens_per_s": toks[0] / wall,
    }


def table(title: str, rows: list[dict]) -> None:
    print(f"\n{title}\n| clients | requests | QPS | p50 latency (s) | p95 latency (s) | aggregate tokens/s |")
    print("|---|---|---|---|---|---|")
    for r in rows:
        print(f"| {r['clients']} | {r['requests']} | {r['qps']:.2f} | {r['p50_s']:.3f} | {r['p95_s']:.3f} | "
              f"{r['tokens_per_s']:.1f} |")


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("-m", "--model")
    ap.add_argument("--clients", default="1,4,8,16")
    ap.add_argument("--requests", type=int, default=8, help="requests per client")
    ap.add_argument("--max-tokens", type=int, default=64)
    ap.add_argument("--parallel", type=int, default=16)
    ap.add_argument("-t", "--threads", type=int)
    ap.add_argument("--compare", action="store_true", help="also serve one request at a time (--parallel 1)")
    a = ap.parse_args()
    clients = [int(c) for c in a.clients.split(",")]
    runs = [("batched", a.parallel)] + ([("serial", 1)] if a.compare else [])
    results = {}
    for name, parallel in runs:
        proc, addr = start(a.model, parallel, a.threads)
        try:
            results[name] = [load(addr, c, a.requests, a.max_tokens) for c in clients]
        finally:
            proc.terminate()
            proc.wait(60)
        table(f"{name}: --parallel {parallel}, max_tokens {a.max_tokens}, model {a.model or 'default'}",
              results[name])
    if a.compare:
        print("\n| clients | batched / serial aggregate tokens/s |\n|---|---|")
        for b, s in zip(results["batched"], results["serial"]):
            print(f"| {b['clients']} | {b['tokens_per_s'] / s['tokens_per_s']:.2f}x |")


if __name__ == "__main__":
    main()
