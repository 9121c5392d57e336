"""A bounded schema-driven fuzz run of `colibri serve` (scripts/fuzz-serve.sh): schemathesis
generates requests from docs/openapi.yaml, valid and invalid, for every operation, and checks
each answer: no 5xx, the status documented, the content type, headers and body valid against
the description, invalid input refused. Then the server must still be alive, answer /health,
and drain and exit 0 on SIGTERM. Prints the number of cases, the statuses seen and the time.

Environment: COLIBRI_BIN (the binary), FUZZ_EXAMPLES (cases per operation and phase, default
50), FUZZ_SEED (default 1), FUZZ_REPORT_DIR (where the HAR of every exchange goes; default a
temporary directory, removed after a run that passed)."""

from __future__ import annotations

import collections
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from http_raw import request  # noqa: E402
from server import Server  # noqa: E402
from spec import SPEC_PATH  # noqa: E402

KEY = "fuzz-key"
# positive_data_acceptance: a request valid by the schema may still be refused for what only the
# served model decides (a prompt past its context, an id outside its vocabulary, a chat template
# that refuses a role); docs/openapi.yaml describes those limits in words.
EXCLUDED = "positive_data_acceptance"


def schemathesis() -> list:
    exe = shutil.which("st") or shutil.which("schemathesis")
    if exe is None:
        sys.exit("schemathesis is not installed: python3 -m pip install schemathesis (see .ci/run)")
    return [exe]


def statuses(har: Path) -> collections.Counter:
    entries = json.loads(har.read_text(encoding="utf-8"))["log"]["entries"]
    return collections.Counter(f'{e["request"]["method"]} {e["response"]["status"]}' for e in entries)


def run_schemathesis(addr: str, har: Path, workdir: Path) -> int:
    cmd = schemathesis() + [
        "run", str(SPEC_PATH),
        "--url", f"http://{addr}",
        "-H", f"Authorization: Bearer {KEY}",
        "--checks", "all",
        "--exclude-checks", EXCLUDED,
        "--max-examples", os.environ.get("FUZZ_EXAMPLES", "50"),
        "--seed", os.environ.get("FUZZ_SEED", "1"),
        "--workers", "1",
        "--phases", "examples,coverage,fuzzing",
        "--request-timeout", "60",
        "--generation-database", "none",
        "--suppress-health-check", "all",
        "--no-color",
        "--report", "har",
        "--report-har-path", str(har),
    ]
    print("+", " ".join(cmd), flush=True)
    # schemathesis keeps a cache of past failures in .schemathesis/ under its working directory.
    return subprocess.run(cmd, cwd=workdir).returncode


def main() -> int:
    chosen = os.environ.get("FUZZ_REPORT_DIR")
    report = Path(chosen or tempfile.mkdtemp(prefix="colibri-fuzz-"))
    report.mkdir(parents=True, exist_ok=True)
    har = report / "exchanges.har"
    t0 = time.monotonic()
    # A short context bounds every generation; the rest is the shipped configuration. The
    # allowed origin is the one the description gives as its example.
    server = Server(["--api-key", KEY, "-c", "256", "--allowed-origins", "http://localhost:3000"])
    try:
        st = run_schemathesis(server.addr, har, report)
        alive = server.alive()
        health = request(server.addr, "GET", "/health").status if alive else None
    finally:
        code = server.stop()
    seen = statuses(har) if har.is_file() else collections.Counter()
    print(f"fuzz: {sum(seen.values())} requests in {time.monotonic() - t0:.0f} s; by method and status: "
          + ", ".join(f"{k} ×{v}" for k, v in sorted(seen.items())))
    problems = []
    if st != 0:
        problems.append(f"schemathesis failed (exit {st})")
    if not alive or health != 200:
        problems.append(f"the server died or stopped answering (alive {alive}, /health {health})")
    if code != 0:
        problems.append(f"the server exited {code} on SIGTERM:\n{server.log_text()}")
    if any(k.split()[1].startswith("5") for k in seen):
        problems.append("5xx answers seen")
    if any("panicked" in line for line in server.log):
        problems.append(f"the server panicked:\n{server.log_text()}")
    for p in problems:
        print("fuzz: FAILED:", p)
    if problems or chosen:
        print(f"fuzz: every exchange is in {har}")
    else:
        shutil.rmtree(report, ignore_errors=True)
    if not problems:
        print("fuzz: passed")
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main())
