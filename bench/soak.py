#!/usr/bin/env python3
"""Soak test of `colibri serve` (a manual tool, never part of CI).

Starts `colibri serve` on a copy of the default model and, for --minutes, runs mixed load from
--clients threads (bench/soak_load.py: streaming and whole completions and chat completions,
/generate, clients that hang up mid-stream, over-long prompts, bad requests, GETs), a burst of
concurrent completions past --parallel + --queue every --burst-every seconds, and a SIGUSR1
reload every --reload-every seconds that alternates between two model files (copies written
with write + fsync + rename over the served path). Every answer is classified (expected or
unexpected); the server's RSS is sampled after the warm-up, every minute and at the end. At the
end the server must be alive, drained (no active or queued sequence, no KV claimed, no 5xx
counted by /metrics) and exit 0 on SIGTERM. Prints a report and writes it as JSON (--out).

Exit status 0 when there was no unexpected outcome and the RSS ended within --rss-tolerance of
its start, 1 otherwise. Python 3 standard library only.

Example:  python3 bench/soak.py --minutes 30 --clients 5 --parallel 2 --out soak.json
"""
from __future__ import annotations

import argparse
import datetime
import http.client
import json
import os
import random
import shlex
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import soak_load  # noqa: E402
from soak_report import Tally, render, sample_proc  # noqa: E402

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def parse_args(argv):
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--binary", default="target/release/colibri",
                   help="colibri executable (relative paths: from the repository root)")
    p.add_argument("--model", default="models/default.colibri", help="model to copy and serve")
    p.add_argument("--minutes", type=float, default=30.0, help="duration of the timed run")
    p.add_argument("--warmup", type=float, default=60.0,
                   help="seconds of load (with one reload halfway) before the first RSS sample")
    p.add_argument("--clients", type=int, default=5, help="client threads of mixed load")
    p.add_argument("--parallel", type=int, default=2, help="colibri serve --parallel")
    p.add_argument("--queue", type=int, default=4, help="colibri serve --queue")
    p.add_argument("--threads", type=int, default=1, help="colibri serve -t (engine threads)")
    p.add_argument("--max-request-tokens", type=int, default=256, help="colibri serve --max-request-tokens")
    p.add_argument("--reload-every", type=float, default=60.0, help="seconds between SIGUSR1 reloads")
    p.add_argument("--burst-every", type=float, default=30.0, help="seconds between bursts")
    p.add_argument("--burst-extra", type=int, default=4, help="burst size beyond --parallel + --queue")
    p.add_argument("--timeout", type=float, default=120.0, help="seconds before a request counts as hung")
    p.add_argument("--rss-tolerance", type=float, default=0.10, help="allowed end/start RSS growth")
    p.add_argument("--seed", type=int, default=0, help="seed of the load's random choices")
    p.add_argument("--work", help="work directory (default: a temporary one, removed at the end)")
    p.add_argument("--out", default="soak-report.json", help="JSON report path")
    return p.parse_args(argv)


def from_repo(path: str) -> str:
    return path if os.path.isabs(path) else os.path.join(REPO, path)


def write_file(src: str, dest: str) -> None:
    """Copy src to dest as a new file: write + fsync a temporary, rename it over dest."""
    tmp = dest + ".tmp"
    with open(src, "rb") as f, open(tmp, "wb") as g:
        shutil.copyfileobj(f, g, 1 << 20)
        g.flush()
        os.fsync(g.fileno())
    os.replace(tmp, dest)
    fd = os.open(os.path.dirname(dest), os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


class Server:
    """The `colibri serve` process: start, readiness, metrics, reloads, stop."""

    def __init__(self, args, work: str):
        self.work, self.served = work, os.path.join(work, "model.colibri")
        self.cmd = [from_repo(args.binary), "serve", "-m", self.served, "--port", "0",
                    "--parallel", str(args.parallel), "--queue", str(args.queue),
                    "-t", str(args.threads), "--max-request-tokens", str(args.max_request_tokens)]
        self.log_path = os.path.join(work, "server.log")
        # Two model files the reloads alternate between; models[which] is being served.
        self.models = [os.path.join(work, "a.colibri"), os.path.join(work, "b.colibri")]
        self.which = 0
        for m in self.models:
            write_file(from_repo(args.model), m)
        write_file(self.models[0], self.served)
        self.proc = None
        self.host, self.port = "127.0.0.1", 0

    def start(self, ready_within: float = 120.0) -> None:
        self.log = open(self.log_path, "wb")
        self.proc = subprocess.Popen(self.cmd, stdout=self.log, stderr=subprocess.STDOUT)
        deadline = time.monotonic() + ready_within
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                raise SystemExit(f"error: colibri serve exited ({self.proc.returncode}): {self.tail()}")
            if not self.port:
                for line in open(self.log_path, encoding="utf-8", errors="replace"):
                    if "listening on http://" in line:
                        self.port = int(line.strip().rsplit(":", 1)[1])
            elif self.get("/health")[0] == 200:
                return
            time.sleep(0.2)
        raise SystemExit(f"error: colibri serve not ready within {ready_within:.0f} s: {self.tail()}")

    def tail(self, n: int = 5) -> str:
        with open(self.log_path, encoding="utf-8", errors="replace") as f:
            return " | ".join(f.read().strip().splitlines()[-n:])

    def get(self, path: str):
        c = soak_load.Client(self.host, self.port, timeout=30)
        try:
            return c.send("GET", path)
        except (OSError, http.client.HTTPException):
            return (None, {}, b"")

    def metrics(self) -> dict:
        status, _, data = self.get("/metrics")
        if status != 200:
            return {}
        out = {}
        for line in data.decode("utf-8", "replace").splitlines():
            if line and not line.startswith("#"):
                key, _, value = line.rpartition(" ")
                out[key] = float(value)
        return out

    def reload(self, wait: float = 60.0) -> str | None:
        """Install the other model file as the served one and SIGUSR1; None when /metrics
        confirms the reload, else why not."""
        before = self.metrics()
        self.which = 1 - self.which
        write_file(self.models[self.which], self.served)
        os.kill(self.proc.pid, signal.SIGUSR1)
        deadline = time.monotonic() + wait
        while time.monotonic() < deadline:
            m = self.metrics()
            if m.get("colibri_reload_failures_total", 0) > before.get("colibri_reload_failures_total", 0):
                return f"reload rejected: {self.tail(2)}"
            if m.get("colibri_reloads_total", 0) > before.get("colibri_reloads_total", 0):
                return None
            time.sleep(0.2)
        return f"reload not confirmed within {wait:.0f} s"

    def drained(self, wait: float = 60.0) -> str | None:
        """None once nothing runs, waits or holds KV budget; else what is left."""
        deadline = time.monotonic() + wait
        left = "no /metrics"
        while time.monotonic() < deadline:
            m = self.metrics()
            keys = ("colibri_active_sequences", "colibri_queue_depth", "colibri_kv_budget_used_bytes")
            left = ", ".join(f"{k} {m[k]:.0f}" for k in keys if m.get(k, 1) != 0)
            if m and not left:
                return None
            time.sleep(0.5)
        return f"not drained after the load stopped: {left}"

    def stop(self, wait: float = 60.0) -> int | None:
        self.proc.send_signal(signal.SIGTERM)
        try:
            return self.proc.wait(wait)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()
            return None
        finally:
            self.log.close()


def server_errors(metrics: dict) -> int:
    """5xx answers other than 503 the server counted (some may have reached no client)."""
    n = 0
    for key, v in metrics.items():
        if key.startswith("colibri_requests_total{") and 'status="5' in key and 'status="503"' not in key:
            n += int(v)
    return n


def start_load(args, server: Server, tally: Tally, stop: threading.Event):
    """The client threads and the burst thread."""
    threads = []
    for i in range(args.clients):
        c = soak_load.Client(server.host, server.port, args.timeout,
                             max_request_tokens=args.max_request_tokens, stop=stop)
        rng = random.Random(args.seed * 1000 + i)
        threads.append(threading.Thread(target=soak_load.client_loop, args=(c, rng, tally.record), daemon=True))

    def bursts():
        c = soak_load.Client(server.host, server.port, args.timeout,
                             max_request_tokens=args.max_request_tokens, stop=stop)
        rng = random.Random(args.seed * 1000 + 999)
        size = args.parallel + args.queue + args.burst_extra
        while not stop.wait(args.burst_every):
            tally.burst(soak_load.burst(c, rng, size, tally.record))

    threads.append(threading.Thread(target=bursts, daemon=True))
    for t in threads:
        t.start()
    return threads


def timed_run(args, server: Server, tally: Tally) -> None:
    """The timed part: an RSS sample every minute, a reload every --reload-every seconds."""
    t0 = time.monotonic()
    end = t0 + args.minutes * 60
    next_sample, next_reload = t0 + 60, t0 + args.reload_every
    while True:
        now = time.monotonic()
        wake = min(next_sample, next_reload, end)
        if wake > now:
            time.sleep(wake - now)
        now = time.monotonic()
        if now >= end:
            return
        if now >= next_sample:
            tally.sample(now - t0, sample_proc(server.proc.pid))
            next_sample += 60
            print(tally.progress(now - t0), flush=True)
        if now >= next_reload:
            tally.reloaded(server.reload())
            next_reload += args.reload_every


def finish(args, server: Server, tally: Tally, stop, threads, t0: float) -> None:
    """Stop the load, check the server drained and is alive, sample, then SIGTERM it."""
    stop.set()
    for t in threads:
        t.join(args.timeout + 30)
    if any(t.is_alive() for t in threads):
        tally.problem("a client thread did not finish within the timeout")
    why = server.drained()
    if why:
        tally.problem(why)
    tally.sample(time.monotonic() - t0, sample_proc(server.proc.pid), final=True)
    alive = server.proc.poll() is None
    tally.server["alive_at_end"] = alive and server.get("/health")[0] == 200
    if not tally.server["alive_at_end"]:
        tally.problem(f"server not alive and healthy at the end: {server.tail()}")
    errors = server_errors(server.metrics())
    tally.server["server_5xx"] = errors
    if errors:
        tally.problem(f"/metrics counted {errors} responses with a 5xx status other than 503")
    code = server.stop() if alive else server.proc.returncode
    tally.server["exit_code"] = code
    if code != 0:
        tally.problem(f"SIGTERM: exit status {code} (want 0): {server.tail()}")


def describe(args, server: Server) -> dict:
    def cpu():
        for line in open("/proc/cpuinfo", encoding="utf-8"):
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
        return "unknown"

    commit = subprocess.run(["git", "-C", REPO, "rev-parse", "--short", "HEAD"],
                            capture_output=True, text=True).stdout.strip()
    return {"date": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
            "commit": commit, "cpu": cpu(), "command": shlex.join([sys.executable] + sys.argv),
            "server_command": shlex.join(server.cmd), "options": vars(args)}


def main(argv=None) -> int:
    args = parse_args(argv)
    work = args.work or tempfile.mkdtemp(prefix="colibri-soak-")
    os.makedirs(work, exist_ok=True)
    server = Server(args, work)
    tally, stop = Tally(), threading.Event()
    server.start()
    print(f"colibri serve pid {server.proc.pid} on port {server.port}; log {server.log_path}", flush=True)
    try:
        threads = start_load(args, server, tally, stop)
        time.sleep(args.warmup / 2)
        tally.reloaded(server.reload())
        time.sleep(args.warmup / 2)
        t0 = time.monotonic()
        tally.sample(0.0, sample_proc(server.proc.pid))
        timed_run(args, server, tally)
        finish(args, server, tally, stop, threads, t0)
        tally.duration = time.monotonic() - t0
    finally:
        if server.proc.poll() is None:
            server.proc.kill()
    report = tally.report(describe(args, server), args.rss_tolerance)
    print(render(report))
    with open(args.out, "w", encoding="utf-8") as f:
        json.dump(report, f, indent=2)
    print(f"report written to {args.out}")
    if not args.work:
        shutil.rmtree(work, ignore_errors=True)
    return 0 if report["verdict"]["pass"] else 1


if __name__ == "__main__":
    sys.exit(main())
