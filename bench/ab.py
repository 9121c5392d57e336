#!/usr/bin/env python3
"""A/B speed of two colibri binaries on the same model files: `colibri bench` of binary A, then
B, alternated ROUNDS times (A B A B ...), on each model; prints per-round B/A ratios of every
test (pp, tg) and their geometric mean. For checking that a refactor leaves speed unchanged
(target: geometric mean within ±3 %) or that a kernel change gains what it claims.

    python3 bench/ab.py --a OLD/colibri --b target/release/colibri -m M1.colibri [-m M2 ...]
        [--rounds 3] [-p 128] [-n 32] [-r 3] [-t 2] [--json out.json]
    python3 bench/ab.py --a BIN --b BIN --env-a COLIBRI_CPU=avx2 --env-b COLIBRI_CPU=avx512 -m M
        (one binary, two kernel paths)
"""
import argparse
import json
import math
import os
import subprocess
import sys
import time


def bench(binary, model, a, env):
    cmd = [binary, "bench", "-m", model, "-p", str(a.p), "-n", str(a.n), "-r", str(a.r), "-t", str(a.t),
           "-o", "json", "--no-probe"]
    extra = dict(kv.split("=", 1) for kv in env)
    out = subprocess.run(cmd, check=True, capture_output=True, text=True, env={**os.environ, **extra}).stdout
    return {row["test"]: row["avg_ts"] for row in json.loads(out)}


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--a", required=True, help="baseline binary")
    ap.add_argument("--b", required=True, help="binary under test")
    ap.add_argument("-m", "--model", action="append", required=True)
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("-p", type=int, default=128)
    ap.add_argument("-n", type=int, default=32)
    ap.add_argument("-r", type=int, default=3)
    ap.add_argument("-t", type=int, default=2)
    ap.add_argument("--env-a", action="append", default=[], help="NAME=VALUE for A's runs")
    ap.add_argument("--env-b", action="append", default=[], help="NAME=VALUE for B's runs")
    ap.add_argument("--json")
    a = ap.parse_args()
    results = []
    logs = []
    for model in a.model:
        name = os.path.basename(model)
        for rnd in range(a.rounds):
            ta = bench(a.a, model, a, a.env_a)
            tb = bench(a.b, model, a, a.env_b)
            load = os.getloadavg()[0]
            for test in ta:
                ratio = tb[test] / ta[test]
                results.append((name, test, rnd, ta[test], tb[test], ratio))
                line = f"{name:<28} {test:<6} round {rnd}: A {ta[test]:9.2f} t/s  B {tb[test]:9.2f} t/s  B/A {ratio:.3f}  (load {load:.2f})"
                logs.append(line)
                print(line, flush=True)
    print()
    ratios = [r[5] for r in results]
    for key in sorted({(r[0], r[1]) for r in results}):
        rs = [r[5] for r in results if (r[0], r[1]) == key]
        print(f"{key[0]:<28} {key[1]:<6} geomean B/A {math.exp(sum(map(math.log, rs)) / len(rs)):.3f} over {len(rs)} rounds")
    g = math.exp(sum(map(math.log, ratios)) / len(ratios))
    print(f"all tests: geometric mean B/A = {g:.3f} over {len(ratios)} ratios")
    if a.json:
        with open(a.json, "w") as f:
            json.dump({"when": time.strftime("%Y-%m-%d %H:%M:%S UTC", time.gmtime()), "a": a.a, "b": a.b,
                       "results": results, "geomean": g}, f, indent=1)
    return 0


if __name__ == "__main__":
    sys.exit(main())
