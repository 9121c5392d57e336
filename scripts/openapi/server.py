"""Start `colibri serve` ($COLIBRI_BIN, default target/release/colibri) on a free loopback port
and wait until it serves; its stderr is kept for the failure messages."""

from __future__ import annotations

import os
import subprocess
import threading
import time
from pathlib import Path
from typing import List, Optional

from http_raw import request

REPO = Path(__file__).resolve().parents[2]
MODEL = REPO / "models" / "default.colibri"


def binary() -> Path:
    return Path(os.environ.get("COLIBRI_BIN", REPO / "target" / "release" / "colibri"))


class Server:
    def __init__(self, args: List[str]) -> None:
        exe = binary()
        if not exe.is_file():
            raise FileNotFoundError(f"{exe} is missing: build it (cargo build --release) or set COLIBRI_BIN")
        self.proc = subprocess.Popen(
            [str(exe), "serve", "-m", str(MODEL), "--port", "0", "-t", "1", *args],
            stdout=subprocess.DEVNULL,
            stderr=subprocess.PIPE,
            text=True,
        )
        self.log: List[str] = []
        self.addr: Optional[str] = None
        announced = threading.Event()
        threading.Thread(target=self._read_log, args=(announced,), daemon=True).start()
        if not announced.wait(60):
            self.stop()
            raise RuntimeError("the server did not announce its address:\n" + self.log_text())
        self.early_health = []  # every /health answer while waiting: 503 while loading, then 200
        t0 = time.monotonic()
        while time.monotonic() - t0 < 60:
            r = request(self.addr, "GET", "/health")
            self.early_health.append(r)
            if r.status == 200:
                return
            time.sleep(0.02)
        self.stop()
        raise RuntimeError("the server did not become healthy:\n" + self.log_text())

    def _read_log(self, announced: threading.Event) -> None:
        assert self.proc.stderr is not None
        for line in self.proc.stderr:
            self.log.append(line)
            if line.startswith("listening on http://"):
                self.addr = line.split("http://", 1)[1].strip()
                announced.set()

    def log_text(self) -> str:
        return "".join(self.log[-50:])

    def alive(self) -> bool:
        return self.proc.poll() is None

    def stop(self) -> int:
        """SIGTERM, then the exit status (a graceful drain exits 0)."""
        if self.proc.poll() is None:
            self.proc.terminate()
        try:
            return self.proc.wait(60)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            return self.proc.wait()
