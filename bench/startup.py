#!/usr/bin/env python3
"""Start-up figures of `colibri run` (a measurement, not a test): open time, process start to
first generated token, and peak RSS against what one token touches.

    python3 bench/startup.py -m MODEL.colibri [--runs 5] [-t 2] [-p The] [--colibri PATH]

Each run is a fresh process `colibri run -m MODEL -p PROMPT -n 1 --temp 0 --ignore-eos`, after one
warm-up run (warm page cache). Reported, median over the runs:
  open         map + validate + tokenizer, as `colibri run` prints it ("[load: X ms")
  first token  wall time from spawning the process to its exit, having generated one token
               (an upper bound on start -> first token: it includes printing and tear-down)
  peak RSS     ru_maxrss of the child (anonymous memory + the mapped weight pages it touched)
and, for the RSS bound, the weights the run touched — the bytes one token reads (`colibri bench`
active_bytes: attention, top-k experts, lm_head, one embedding row) plus the experts the prompt's
other tokens chose (from `--debug-routing` and the expert layout `colibri inspect` prints) — and
the KV cache of the prompt + 1 token.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import statistics
import subprocess
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent


def one(cmd: list[str]) -> tuple[float, float, int, int]:
    """(wall seconds, load ms, prompt tokens, peak RSS bytes) of one process."""
    t0 = time.perf_counter()
    p = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    _, status, ru = os.wait4(p.pid, 0)
    wall = time.perf_counter() - t0
    err = p.stderr.read().decode(errors="replace") if p.stderr else ""
    p.returncode = os.waitstatus_to_exitcode(status)
    if p.returncode != 0:
        raise SystemExit(f"{' '.join(cmd)} failed ({p.returncode}):\n{err[-2000:]}")
    m = re.search(r"\[load: ([0-9.]+) ms \| prompt: (\d+) tokens", err)
    if not m:
        raise SystemExit(f"no stats line in:\n{err[-2000:]}")
    return wall, float(m.group(1)), int(m.group(2)), ru.ru_maxrss * 1024


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("-m", "--model", required=True)
    ap.add_argument("--runs", type=int, default=5)
    ap.add_argument("-t", "--threads", type=int, default=2)
    ap.add_argument("-p", "--prompt", default="The")
    ap.add_argument("--colibri", default=str(REPO / "target" / "release" / "colibri"))
    ap.add_argument("--json", action="store_true", help="print the figures as JSON")
    a = ap.parse_args()

    cmd = [a.colibri, "run", "-m", a.model, "-p", a.prompt, "-n", "1", "--temp", "0", "--ignore-eos",
           "-t", str(a.threads)]
    one(cmd)  # warm-up: the touched pages enter the page cache
    runs = [one(cmd) for _ in range(a.runs)]
    bench = json.loads(subprocess.run([a.colibri, "bench", "-m", a.model, "-p", "1", "-n", "0", "-r", "1",
                                       "--no-probe", "-o", "json", "-t", str(a.threads)],
                                      check=True, capture_output=True, text=True).stdout)[0]
    info = subprocess.run([a.colibri, "inspect", a.model], check=True, capture_output=True, text=True).stdout
    kv_per_token = int(re.search(r"kv cache\s+(\d+) bytes per token", info).group(1))
    top_k = int(re.search(r"top-(\d+)", info).group(1))
    # Bytes of one expert per layer (gate + up + down), from the expert layout lines.
    expert_bytes: dict[int, int] = {}
    for layer, each in re.findall(r"layers\.(\d+)\.moe\.experts\.\w+\s+\d+ experts .*?\((\d+) bytes each", info):
        expert_bytes[int(layer)] = expert_bytes.get(int(layer), 0) + int(each)
    # Which experts the prompt's tokens used: a token reads top_k experts per layer (counted in
    # active_bytes); the prompt's other tokens may pick more distinct ones.
    trace = subprocess.run(cmd + ["--debug-routing"], check=True, capture_output=True, text=True).stderr
    used: dict[int, set[int]] = {}
    for layer, ids in re.findall(r"layer (\d+) -> experts\[([0-9,]*)\]", trace):
        used.setdefault(int(layer), set()).update(int(e) for e in ids.split(",") if e)
    extra_experts = sum(max(0, len(used.get(l, ())) - top_k) * b for l, b in expert_bytes.items())
    prompt_tokens = runs[0][2]
    weights_touched = bench["active_bytes"] + extra_experts
    touched = weights_touched + kv_per_token * (prompt_tokens + 1)
    out = {
        "model": a.model,
        "model_bytes": os.path.getsize(a.model),
        "runs": a.runs,
        "threads": a.threads,
        "prompt_tokens": prompt_tokens,
        "open_ms_median": statistics.median(r[1] for r in runs),
        "first_token_ms_median": statistics.median(r[0] for r in runs) * 1e3,
        "first_token_ms_all": [round(r[0] * 1e3, 1) for r in runs],
        "peak_rss_bytes_max": max(r[3] for r in runs),
        "active_bytes_per_token": bench["active_bytes"],
        "distinct_experts_per_layer": {l: len(e) for l, e in sorted(used.items())},
        "weights_touched_bytes": weights_touched,
        "kv_bytes": kv_per_token * (prompt_tokens + 1),
    }
    out["rss_over_touched"] = out["peak_rss_bytes_max"] / touched
    if a.json:
        print(json.dumps(out, indent=2))
        return
    mib = 1 << 20
    print(f"model            {a.model} ({out['model_bytes'] / mib:.0f} MiB), {a.threads} threads, "
          f"prompt {prompt_tokens} tokens, median of {a.runs} warm starts")
    print(f"open             {out['open_ms_median']:.2f} ms (map + validate + tokenizer)")
    print(f"first token      {out['first_token_ms_median']:.1f} ms (spawn -> exit after 1 token; "
          f"all: {out['first_token_ms_all']})")
    print(f"peak RSS         {out['peak_rss_bytes_max'] / mib:.1f} MiB vs weights touched "
          f"{weights_touched / mib:.1f} MiB (one token's {out['active_bytes_per_token'] / mib:.1f} MiB + the "
          f"prompt's other experts; distinct per layer {out['distinct_experts_per_layer']}) + KV "
          f"{out['kv_bytes'] / 1024:.1f} KiB = {out['rss_over_touched']:.2f}x")


if __name__ == "__main__":
    main()
