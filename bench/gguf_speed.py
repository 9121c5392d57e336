#!/usr/bin/env python3
"""Speed on the same GGUF file: llama-bench on a llama-quantize'd GGUF against `colibri bench` on
the .colibri file `colibri convert` makes of that very GGUF (issue 14), engines alternating.

    nice -n 10 /work/venv/bin/python bench/gguf_speed.py --model olmoe-4l --types Q4_K_M,Q8_0 \
        [--rounds 3] [-p 256] [-n 32] [-r 3] [-t 2] [--work DIR] [--keep] [--out results.json]

Steps (files in WORK/NAME, deleted at the end unless --keep; the largest file alive at once is the
bf16 checkpoint or the BF16 GGUF made from it, never both):
  1. tools/make_bench_models.py NAME (random bf16 weights, published shapes);
  2. bench/gguf_convert.py -> NAME-BF16.gguf, the checkpoint deleted, llama-quantize -> one GGUF
     per type, NAME-BF16.gguf deleted;
  3. colibri convert NAME-TYPE.gguf -o NAME-TYPE.colibri;
  4. rounds: per round, per type, llama-bench then colibri bench (A B A B ...);
  5. a markdown table (t/s best round (mean), colibri/llama.cpp per round, geometric mean), the
     1-minute load average around every run, raw JSON to --out.
Helpers (running, parsing, summaries, paired ratios) are bench/compare.py's.
"""
from __future__ import annotations

import argparse
import datetime
import json
import os
import shutil
import sys
from pathlib import Path

BENCH = Path(__file__).resolve().parent
sys.path.insert(0, str(BENCH))
import compare as c  # noqa: E402

LLAMA_SRC = "/work/llama/llama_cpp_python-0.3.36/vendor/llama.cpp"
LLAMA_BIN = "/work/llama/build/bin"


def parse_args() -> argparse.Namespace:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--model", default="olmoe-4l", choices=c.MODELS)
    ap.add_argument("--types", default="Q4_K_M,Q8_0")
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("-p", dest="n_prompt", type=int, default=256)
    ap.add_argument("-n", dest="n_gen", type=int, default=32)
    ap.add_argument("-r", dest="reps", type=int, default=3)
    ap.add_argument("-t", dest="threads", type=int, default=2)
    ap.add_argument("--work", type=Path, default=Path("/tmp/gguf-speed"))
    ap.add_argument("--keep", action="store_true", help="keep the GGUF and .colibri files")
    ap.add_argument("--out", type=Path, help="raw results JSON (default WORK/NAME-results.json)")
    ap.add_argument("--colibri", type=Path, default=c.REPO / "target/release/colibri")
    ap.add_argument("--baseline", type=Path, help="a second colibri binary run in each round too (A/B)")
    ap.add_argument("--llama-src", default=LLAMA_SRC)
    ap.add_argument("--llama-bin", default=LLAMA_BIN)
    ap.add_argument("--llama-args", default="", help="extra llama-bench arguments")
    ap.add_argument("--llama-env", action="append", default=[], metavar="K=V",
                    help="environment for llama-bench, e.g. OMP_WAIT_POLICY=passive (its OpenMP threads "
                         "otherwise spin at barriers, which collapses on an oversubscribed machine)")
    a = ap.parse_args()
    a.types = [t for t in a.types.split(",") if t]
    return a


def prepare(a, outdir: Path) -> dict[str, dict]:
    """{type: {"gguf": path, "colibri": path}} made as the module doc says (reused when there)."""
    files = {t: {"gguf": outdir / f"{a.model}-{t}.gguf", "colibri": outdir / f"{a.model}-{t}.colibri"}
             for t in a.types}
    if not all(f["gguf"].exists() for f in files.values()):
        bf16 = outdir / f"{a.model}-BF16.gguf"
        if not bf16.exists():
            ckpt = c.make_checkpoint(a.model, outdir / "models")
            p = c.run([sys.executable, BENCH / "gguf_convert.py", "--llama-cpp", a.llama_src, ckpt,
                       "--outtype", "bf16", "--outfile", bf16])
            shutil.rmtree(outdir / "models", ignore_errors=True)
            if p.returncode != 0:
                sys.exit(f"convert_hf_to_gguf failed: {c.last_line(p.stderr)}")
        for t, f in files.items():
            if not f["gguf"].exists():
                p = c.run([f"{a.llama_bin}/llama-quantize", bf16, f["gguf"], t, a.threads])
                if p.returncode != 0:
                    sys.exit(f"llama-quantize {t} failed: {c.last_line(p.stderr)}")
        bf16.unlink()
    for t, f in files.items():
        if not f["colibri"].exists():
            p = c.run([a.colibri, "convert", f["gguf"], "-o", f["colibri"], "--no-progress"])
            if p.returncode != 0:
                sys.exit(f"colibri convert {f['gguf'].name} failed: {c.last_line(p.stderr)}")
        f["bytes"] = {k: f[k].stat().st_size for k in ("gguf", "colibri")}
    return files


def rounds(a, files: dict[str, dict]) -> list[dict]:
    """llama-bench, colibri bench, per type, per round."""
    runs = []
    for rnd in range(1, a.rounds + 1):
        for t, f in files.items():
            common = ["-p", a.n_prompt, "-n", a.n_gen, "-t", a.threads, "-r", a.reps, "-o", "json"]
            plan = [("llama.cpp", [f"{a.llama_bin}/llama-bench", "-m", f["gguf"], *common, *a.llama_args.split()]),
                    ("colibri", [a.colibri, "bench", "-m", f["colibri"], *common])]
            if a.baseline:
                plan.append(("baseline", [a.baseline, "bench", "-m", f["colibri"], *common]))
            for engine, cmd in plan:
                if engine == "llama.cpp" and a.llama_env:
                    cmd = ["env", *a.llama_env, *cmd]
                r = c.bench_run(engine, cmd)
                r.update(round=rnd, precision=t)
                runs.append(r)
                for row in r.get("rows", []):
                    if c.test_name(row):
                        c.log(f"round {rnd} {t} {engine} {c.test_name(row)}: {float(row['avg_ts']):.2f} t/s")
    return runs


def table(a, runs: list[dict]) -> str:
    s = c.summarize(runs, a.threads)
    loads = [x for r in runs for x in r.get("loadavg_1m", [])]
    base = " | baseline t/s | colibri/baseline" if a.baseline else ""
    out = [f"| GGUF type | test | colibri t/s | llama.cpp t/s | colibri/llama.cpp per round | **geo. mean**{base} |",
           "|---|---|---:|---:|---|---:|" + ("---:|---:|" if a.baseline else "")]
    for t in a.types:
        for test in (f"pp{a.n_prompt}", f"tg{a.n_gen}"):
            col, lc, bl = (s.get((t, e, test)) for e in ("colibri", "llama.cpp", "baseline"))
            per = " / ".join(f"{col['by_round'][r] / lc['by_round'][r]:.2f}"
                             for r in sorted(col["by_round"]) if r in lc["by_round"]) if col and lc else "—"
            extra = f" {c.fmt_ts(bl)} | {c.fmt_ratio(c.paired_ratio(col, [bl]))} |" if a.baseline else ""
            out.append(f"| {t} | {test} | {c.fmt_ts(col)} | {c.fmt_ts(lc)} | {per} | "
                       f"**{c.fmt_ratio(c.paired_ratio(col, [lc]))}** |{extra}")
    out.append(f"\nload average (1 min) around the runs: {min(loads):.1f} .. {max(loads):.1f}" if loads else "")
    return "\n".join(out)


def main() -> int:
    a = parse_args()
    c.ensure_nice()
    outdir = a.work / a.model
    outdir.mkdir(parents=True, exist_ok=True)
    files = prepare(a, outdir)
    runs = rounds(a, files)
    doc = {"argv": sys.argv, "date": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
           "machine": c.machine_info(), "colibri": c.colibri_version(a.colibri),
           "files": {t: {k: str(v) for k, v in f.items()} for t, f in files.items()}, "runs": runs}
    out = a.out or a.work / f"{a.model}-results.json"
    c.write_results(out, doc)
    if not a.keep:
        shutil.rmtree(outdir, ignore_errors=True)
    print(f"{doc['machine']['cpu']}, {a.threads} threads, colibri {doc['colibri']}; raw: {out}\n")
    print(table(a, runs))
    return 0


if __name__ == "__main__":
    sys.exit(main())
