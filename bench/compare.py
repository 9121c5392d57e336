#!/usr/bin/env python3
"""Peer comparison: colibri vs llama.cpp vs PyTorch/transformers, same machine, same run.

    nice -n 10 /work/venv/bin/python bench/compare.py --models olmoe-4l
    /work/venv/bin/python bench/compare.py --models qwen2moe-4l,olmoe-4l --precisions bf16,q8 --rounds 3

Never part of CI. See bench/README.md for what each step does and the disk it needs.

For each model, one at a time (its files are deleted after measuring unless --keep):
  1. checkpoint: tools/make_bench_models.py NAME --out WORK/models (bf16 safetensors + tokenizer);
  2. llama.cpp:  bench/gguf_convert.py (convert_hf_to_gguf.py, sentencepiece vocab) -> BF16 GGUF,
                 llama-quantize -> Q8_0 and Q4_0; each GGUF is smoke-loaded by llama-bench;
  3. colibri:    colibri convert --dtype bf16 | --quantize q8 | --quantize w4a16 (a precision whose
                 flag this colibri does not know is reported as "unsupported");
  4. rounds:     for each round, for each precision: llama-bench, colibri bench, transformers (bf16
                 only, bench/hf_bench.py), i.e. the engines alternate A B C A B C ...;
  5. report:     markdown table per model (t/s per engine, mean over rounds of each round's average,
                 and ratios colibri/peer); every raw result goes to --out as JSON.

llama.cpp is built by tools/build_llama_cpp.sh (called here if missing; idempotent).
"""

from __future__ import annotations

import argparse
import datetime
import json
import os
import platform
import re
import shlex
import shutil
import statistics
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
BENCH = REPO / "bench"
MODELS = ("mixtral-2l", "qwen2moe-4l", "olmoe-4l", "deepseek-v2-lite-3l", "gpt-oss-20b-4l", "qwen3-next-4l")
NICENESS = 10


@dataclass(frozen=True)
class Precision:
    """One weight precision and how each engine spells it."""

    name: str  # harness name (--precisions)
    gguf_type: str  # llama.cpp file type (BF16 from the converter, others from llama-quantize)
    colibri_args: tuple[str, ...]  # colibri convert flags
    colibri_label: str


def colibri_mode(prec: Precision) -> str:
    """What colibri runs for a precision: quantised files multiply with int8 activations (W8A8 /
    W4A8) unless COLIBRI_QUANT_ACT=float asks for float ones (W8A16 / W4A16)."""
    if prec.name in ("bf16", "mxfp4"):
        return "bf16" if prec.name == "bf16" else "MXFP4 experts, bf16 rest"
    bits = "8" if prec.name == "q8" else "4"
    act = "A16" if os.environ.get("COLIBRI_QUANT_ACT", "int8") in ("float", "f32") else "A8"
    return f"{prec.name} file, W{bits}{act}"


PRECISIONS = {
    "bf16": Precision("bf16", "BF16", ("--dtype", "bf16"), "bf16"),
    "q8": Precision("q8", "Q8_0", ("--quantize", "q8"), "q8"),
    "q4": Precision("q4", "Q4_0", ("--quantize", "w4a16"), "w4a16"),
    # GPT-OSS as the hub ships it: both converters keep the MXFP4 experts, the rest bf16.
    "mxfp4": Precision("mxfp4", "BF16", ("--dtype", "bf16"), "mxfp4"),
}


# ------------------------------------------------------------------------------------------------
# command line and process helpers
# ------------------------------------------------------------------------------------------------


def parse_args(argv: list[str]) -> argparse.Namespace:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--models", default="olmoe-4l", help=f"comma-separated subset of {','.join(MODELS)} (or 'all')")
    ap.add_argument("--precisions", default="bf16,q8,q4", help="comma-separated subset of bf16,q8,q4,mxfp4 (GPT-OSS)")
    ap.add_argument("--rounds", type=int, default=2, help="alternation rounds (default 2)")
    ap.add_argument("--reps", type=int, default=3, help="repetitions inside each engine run (-r, default 3)")
    ap.add_argument("--threads", "-t", type=int, default=2)
    ap.add_argument("-p", "--n-prompt", type=int, default=512)
    ap.add_argument("-n", "--n-gen", type=int, default=64)
    ap.add_argument("-d", "--depth", type=int, default=0, help="tokens in the cache before each test (both engines' -d)")
    ap.add_argument("--kv-type", choices=["f32", "f16", "bf16"],
                    help="KV cache type of colibri and llama.cpp (-ctk/-ctv); default: each engine's own "
                         "(colibri f32, llama.cpp f16). Transformers holds K and V in the model's dtype (bf16).")
    ap.add_argument("--work", type=Path, default=Path("/work/bench-work"), help="scratch dir for models and files")
    ap.add_argument("--out", type=Path, help="raw results JSON (default WORK/results.json)")
    ap.add_argument("--keep", action="store_true", help="keep checkpoints and converted files")
    ap.add_argument("--skip-hf", action="store_true", help="do not run transformers")
    ap.add_argument("--colibri", type=Path, default=REPO / "target" / "release" / "colibri")
    ap.add_argument("--llama-args", default="", metavar="ARGS",
                    help="extra llama-bench arguments, e.g. '--poll 0' (default: none, llama-bench's defaults)")
    ap.add_argument("--report", type=Path, metavar="RESULTS_JSON",
                    help="only print the tables of an earlier run's results file")
    ap.add_argument("--llama-cpp", type=Path, default=Path(os.environ.get("LLAMACPP_DIR", "/work/llama")),
                    help="llama.cpp dir of tools/build_llama_cpp.sh (env LLAMACPP_DIR)")
    a = ap.parse_args(argv)
    a.models = list(MODELS) if a.models == "all" else [m for m in a.models.split(",") if m]
    a.precisions = [p for p in a.precisions.split(",") if p]
    for m in a.models:
        if m not in MODELS:
            ap.error(f"unknown model {m!r} (choose from {', '.join(MODELS)})")
    for p in a.precisions:
        if p not in PRECISIONS:
            ap.error(f"unknown precision {p!r} (choose from {', '.join(PRECISIONS)})")
    a.out = a.out or a.work / "results.json"
    return a


def log(msg: str) -> None:
    print(f"[compare {time.strftime('%H:%M:%S')}] {msg}", file=sys.stderr, flush=True)


def ensure_nice() -> None:
    """Run at niceness >= NICENESS (the machine is shared); children inherit it."""
    cur = os.nice(0)
    if cur < NICENESS:
        os.nice(NICENESS - cur)


def lock_work_dir(work: Path):
    """One harness run per work dir: a second one would delete or overwrite the first one's files.
    Returns the open lock file (held until the process exits)."""
    import fcntl

    f = open(work / ".compare.lock", "w")
    try:
        fcntl.flock(f, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        sys.exit(f"another bench/compare.py run is using {work} (pass a different --work)")
    return f


def run(cmd: list, *, env: dict | None = None) -> subprocess.CompletedProcess:
    """Run a command, capture its output, log it and its duration. Never raises on failure."""
    cmd = [str(c) for c in cmd]
    log("$ " + shlex.join(cmd))
    t0 = time.perf_counter()
    p = subprocess.run(cmd, capture_output=True, text=True, env=env)
    p.seconds = time.perf_counter() - t0  # type: ignore[attr-defined]
    if p.returncode != 0:
        log(f"exit {p.returncode} after {p.seconds:.1f} s: {last_line(p.stderr) or last_line(p.stdout)}")
    return p


def last_line(text: str) -> str:
    """The most telling line of an error output: the first `error...` line, else the last line."""
    lines = [ln.strip() for ln in (text or "").splitlines() if ln.strip()]
    errors = [ln for ln in lines if ln.lower().startswith("error")]
    return errors[0] if errors else (lines[-1] if lines else "")


def parse_json_rows(text: str) -> list[dict] | None:
    """Bench JSON from stdout: a list of objects (or an object holding one); tolerant of extra lines."""
    candidates = [text]
    if "[" in text and "]" in text:
        candidates.append(text[text.index("[") : text.rindex("]") + 1])
    for c in candidates:
        try:
            doc = json.loads(c)
        except (json.JSONDecodeError, ValueError):
            continue
        if isinstance(doc, dict):
            doc = next((v for v in doc.values() if isinstance(v, list)), [doc])
        if isinstance(doc, list) and all(isinstance(r, dict) for r in doc):
            return doc
    return None


def test_name(row: dict) -> str | None:
    """llama-bench test label of a result row: pp512, tg64 (None for mixed/other rows)."""
    n_p, n_g = int(row.get("n_prompt") or 0), int(row.get("n_gen") or 0)
    if n_p > 0 and n_g == 0:
        return f"pp{n_p}"
    if n_g > 0 and n_p == 0:
        return f"tg{n_g}"
    return None


# ------------------------------------------------------------------------------------------------
# machine and versions
# ------------------------------------------------------------------------------------------------


def machine_info() -> dict:
    """CPU model, SIMD flags that matter here, core count, memory."""
    lscpu = subprocess.run(["lscpu"], capture_output=True, text=True).stdout
    model = next((ln.split(":", 1)[1].strip() for ln in lscpu.splitlines() if ln.startswith("Model name")), "?")
    flags = ""
    with open("/proc/cpuinfo") as f:
        for ln in f:
            if ln.startswith("flags"):
                flags = ln.split(":", 1)[1]
                break
    simd = sorted(f for f in flags.split() if re.fullmatch(r"avx|avx2|fma|f16c|avx512\w*|amx\w*|avx_vnni", f))
    mem_kib = 0
    with open("/proc/meminfo") as f:
        for ln in f:
            if ln.startswith("MemTotal"):
                mem_kib = int(ln.split()[1])
    return {
        "cpu": model,
        "cores": os.cpu_count(),
        "simd_flags": simd,
        "mem_gib": round(mem_kib / 2**20, 1),
        "kernel": platform.release(),
        "python": platform.python_version(),
    }


def colibri_version(colibri: Path) -> str:
    v = run([colibri, "--version"]).stdout.strip() if colibri.exists() else "missing"
    g = subprocess.run(["git", "-C", str(REPO), "rev-parse", "--short", "HEAD"], capture_output=True, text=True)
    return f"{v} (repo {g.stdout.strip() or '?'})"


# ------------------------------------------------------------------------------------------------
# step 0: tools (llama.cpp build, colibri capabilities)
# ------------------------------------------------------------------------------------------------


class LlamaCpp:
    """Paths of the llama.cpp build made by tools/build_llama_cpp.sh."""

    def __init__(self, cache: Path):
        self.cache = cache
        self.src = cache / "llama.cpp"
        self.bench = cache / "build" / "bin" / "llama-bench"
        self.quantize = cache / "build" / "bin" / "llama-quantize"

    def ensure_built(self) -> None:
        if not (self.bench.exists() and self.quantize.exists()):
            log(f"llama.cpp not built in {self.cache}: running tools/build_llama_cpp.sh")
            env = dict(os.environ, LLAMACPP_DIR=str(self.cache), PYTHON=sys.executable, INSTALL_GGUF_PY="1")
            if subprocess.run(["bash", str(BENCH.parent / "tools" / "build_llama_cpp.sh")], env=env).returncode != 0:
                sys.exit("llama.cpp build failed")

    def build_info(self) -> str:
        f = self.cache / "BUILD_INFO"
        return f.read_text().strip() if f.exists() else "?"


def colibri_has_bench(colibri: Path) -> tuple[bool, str]:
    """Does this colibri binary have the `bench` subcommand?"""
    if not colibri.exists():
        return False, f"binary not found at {colibri} (cargo build --release -p colibri-cli)"
    p = run([colibri, "bench", "--help"])
    if p.returncode != 0:
        return False, f"`colibri bench` not available: {last_line(p.stderr)}"
    return True, ""


# ------------------------------------------------------------------------------------------------
# step 1: the HF checkpoint
# ------------------------------------------------------------------------------------------------


def make_checkpoint(name: str, models_dir: Path) -> Path:
    """tools/make_bench_models.py NAME --out models_dir (reused if a complete one is there)."""
    out = models_dir / name
    if (out / "config.json").exists():
        log(f"{name}: reusing checkpoint {out}")
        return out
    p = run([sys.executable, REPO / "tools" / "make_bench_models.py", name, "--out", models_dir])
    if p.returncode != 0:
        sys.exit(f"{name}: make_bench_models.py failed:\n{p.stderr[-3000:]}")
    return out


# ------------------------------------------------------------------------------------------------
# step 2: llama.cpp files
# ------------------------------------------------------------------------------------------------


def gguf_convert(llama: LlamaCpp, ckpt: Path, out: Path) -> str | None:
    """HF checkpoint -> BF16 GGUF through bench/gguf_convert.py. Returns an error or None."""
    if out.exists():
        return None
    p = run([sys.executable, BENCH / "gguf_convert.py", "--llama-cpp", llama.src,
             ckpt, "--outtype", "bf16", "--outfile", out])
    return None if p.returncode == 0 else f"convert_hf_to_gguf failed: {last_line(p.stderr)}"


def gguf_quantize(llama: LlamaCpp, src: Path, out: Path, qtype: str, threads: int) -> str | None:
    """BF16 GGUF -> qtype GGUF with llama-quantize. Returns an error or None."""
    if out.exists():
        return None
    p = run([llama.quantize, src, out, qtype, threads])
    return None if p.returncode == 0 else f"llama-quantize {qtype} failed: {last_line(p.stderr)}"


def gguf_smoke(llama: LlamaCpp, path: Path, threads: int) -> str | None:
    """Check that llama-bench loads the GGUF and runs a tiny test. Returns an error or None."""
    p = run([llama.bench, "-m", path, "-p", 8, "-n", 2, "-t", threads, "-r", 1, "-o", "json"])
    if p.returncode != 0 or not parse_json_rows(p.stdout):
        return f"llama-bench cannot load {path.name}: {last_line(p.stderr)}"
    return None


def prepare_llamacpp(llama: LlamaCpp, ckpt: Path, outdir: Path, name: str, precs: list[Precision],
                     threads: int) -> dict[str, dict]:
    """All requested GGUF files for one model: {precision: {"path": ..} or {"error": ..}}."""
    files: dict[str, dict] = {}
    bf16 = outdir / f"{name}-BF16.gguf"
    err = gguf_convert(llama, ckpt, bf16)
    for prec in precs:
        path = bf16 if prec.gguf_type == "BF16" else outdir / f"{name}-{prec.gguf_type}.gguf"
        if not err and path != bf16:
            err_q = gguf_quantize(llama, bf16, path, prec.gguf_type, threads)
        else:
            err_q = None
        e = err or err_q or gguf_smoke(llama, path, threads)
        files[prec.name] = {"error": e} if e else {"path": str(path), "bytes": path.stat().st_size}
        log(f"{name} llama.cpp {prec.gguf_type}: {e or f'{path} ({path.stat().st_size / 1e9:.2f} GB)'}")
    if "bf16" not in [p.name for p in precs] and bf16.exists():
        bf16.unlink()  # only the quantization source
    return files


# ------------------------------------------------------------------------------------------------
# step 3: colibri files
# ------------------------------------------------------------------------------------------------


def is_usage_error(p: subprocess.CompletedProcess) -> bool:
    """clap's answer to a flag or value this colibri does not know (exit status 2)."""
    text = p.stderr.lower()
    return p.returncode == 2 and any(
        s in text for s in ("unexpected argument", "unrecognized", "invalid value", "unknown", "possible values"))


def colibri_convert(colibri: Path, ckpt: Path, out: Path, prec: Precision) -> dict:
    """HF checkpoint -> .colibri at one precision: {"path": ..} or {"error": ..} / {"unsupported": ..}."""
    if not out.exists():
        p = run([colibri, "convert", ckpt, "-o", out, *prec.colibri_args, "--no-progress"])
        if is_usage_error(p):
            return {"unsupported": f"colibri: unsupported ({shlex.join(prec.colibri_args)}: {last_line(p.stderr)})"}
        if p.returncode != 0:
            return {"error": f"colibri convert failed: {last_line(p.stderr)}"}
    return {"path": str(out), "bytes": out.stat().st_size}


def prepare_colibri(colibri: Path, ckpt: Path, outdir: Path, name: str, precs: list[Precision]) -> dict[str, dict]:
    files = {}
    for prec in precs:
        files[prec.name] = colibri_convert(colibri, ckpt, outdir / f"{name}-{prec.colibri_label}.colibri", prec)
        log(f"{name} colibri {prec.colibri_label}: {files[prec.name]}")
    return files


# ------------------------------------------------------------------------------------------------
# step 4: the engine runs
# ------------------------------------------------------------------------------------------------


def bench_run(engine: str, cmd: list) -> dict:
    """Run one engine's bench command; returns {"cmd", "seconds", "rows"} or with "error"."""
    load_before = os.getloadavg()[0]
    p = run(cmd)
    res = {"engine": engine, "cmd": shlex.join(str(c) for c in cmd), "seconds": round(p.seconds, 2),
           "loadavg_1m": [round(load_before, 2), round(os.getloadavg()[0], 2)]}  # before, after: noise gauge
    rows = parse_json_rows(p.stdout) if p.returncode == 0 else None
    if rows is None:
        res["error"] = f"exit {p.returncode}: {last_line(p.stderr) or 'no JSON on stdout'}"
        res["stderr_tail"] = p.stderr[-2000:]
    else:
        res["rows"] = rows
    return res


def llama_cmd(llama: LlamaCpp, path: str, a: argparse.Namespace) -> list:
    kv = ["-ctk", a.kv_type, "-ctv", a.kv_type] if a.kv_type else []
    return [llama.bench, "-m", path, "-p", a.n_prompt, "-n", a.n_gen, "-d", a.depth, "-t", a.threads, "-r", a.reps,
            "-o", "json", *kv, *shlex.split(a.llama_args)]


def colibri_cmd(a: argparse.Namespace, path: str) -> list:
    kv = ["--kv-type", a.kv_type] if a.kv_type else []
    return [a.colibri, "bench", "-m", path, "-p", a.n_prompt, "-n", a.n_gen, "-d", a.depth, "-t", a.threads,
            "-r", a.reps, "-o", "json", *kv]


def hf_cmd(a: argparse.Namespace, ckpt: Path) -> list:
    return [sys.executable, BENCH / "hf_bench.py", ckpt, "-p", a.n_prompt, "-n", a.n_gen, "-t", a.threads,
            "-r", a.reps]


def run_rounds(a, llama: LlamaCpp, ckpt: Path, gguf: dict, col: dict, col_ok: bool) -> list[dict]:
    """A B C A B C ...: per round, per precision, llama.cpp then colibri then transformers (bf16)."""
    runs = []
    for rnd in range(1, a.rounds + 1):
        for pname in a.precisions:
            plan = []
            if "path" in gguf[pname]:
                plan.append(("llama.cpp", llama_cmd(llama, gguf[pname]["path"], a)))
            if col_ok and "path" in col.get(pname, {}):
                plan.append(("colibri", colibri_cmd(a, col[pname]["path"])))
            if pname == "bf16" and not a.skip_hf and not a.depth:
                plan.append(("transformers", hf_cmd(a, ckpt)))
            for engine, cmd in plan:
                log(f"round {rnd}/{a.rounds} {pname} {engine}")
                r = bench_run(engine, cmd)
                r.update(round=rnd, precision=pname)
                runs.append(r)
                for row in r.get("rows", []):
                    if test_name(row):
                        log(f"  {engine} {pname} {test_name(row)}: {float(row.get('avg_ts', 0)):.2f} t/s")
    return runs


# ------------------------------------------------------------------------------------------------
# step 5: summary and report (computed from the results document alone, so --report can redo it)
# ------------------------------------------------------------------------------------------------


def comparable(row: dict, threads: int, depth: int = 0) -> bool:
    """Only rows at the requested depth and thread count are compared (an engine may print more)."""
    return int(row.get("n_depth") or 0) == depth and int(row.get("n_threads") or threads) == threads


def summarize(runs: list[dict], threads: int, depth: int = 0) -> dict:
    """{(precision, engine, test): {"by_round": {round: avg_ts}, "best", "mean", "min", "rounds"}}."""
    per: dict[tuple, dict[int, float]] = {}
    for r in runs:
        for row in r.get("rows", []):
            t = test_name(row)
            if t and row.get("avg_ts") is not None and comparable(row, threads, depth):
                per.setdefault((r["precision"], r["engine"], t), {})[int(r["round"])] = float(row["avg_ts"])
    return {k: {"by_round": v, "best": max(v.values()), "mean": statistics.fmean(v.values()),
                "min": min(v.values()), "rounds": len(v)} for k, v in per.items()}


def paired_ratio(num: dict | None, dens: list[dict | None]) -> float | None:
    """colibri / peer, paired by round (runs of one round ran back to back under the same machine
    load): per round, colibri's t/s over the fastest given peer's; geometric mean over the rounds
    where all of them have a value."""
    dens = [d for d in dens if d]
    if not num or not dens:
        return None
    rounds = set(num["by_round"]).intersection(*(d["by_round"] for d in dens))
    ratios = [num["by_round"][r] / max(d["by_round"][r] for d in dens) for r in sorted(rounds)]
    ratios = [x for x in ratios if x > 0]
    return statistics.geometric_mean(ratios) if ratios else None


def fmt_ts(s: dict | None) -> str:
    if not s:
        return "—"
    return f"{s['best']:.2f} ({s['mean']:.2f})" if s["rounds"] > 1 else f"{s['best']:.2f}"


def fmt_ratio(x: float | None) -> str:
    return "—" if x is None else f"{x:.2f}×"


def model_table(model: str, st: dict, summary: dict, notes: list[str]) -> str:
    """Markdown table of one model: t/s per engine and colibri's ratios."""
    tests = [f"pp{st['n_prompt']}", f"tg{st['n_gen']}"]
    out = [f"### {model}", "",
           "| precision | test | colibri t/s | llama.cpp t/s | transformers t/s | colibri/llama.cpp "
           "| colibri/transformers | colibri/best peer |",
           "|---|---|---:|---:|---:|---:|---:|---:|"]
    for pname in st["precisions"]:
        prec = PRECISIONS[pname]
        for t in tests:
            c, lcpp, hf = (summary.get((pname, e, t)) for e in ("colibri", "llama.cpp", "transformers"))
            best_peer = fmt_ratio(paired_ratio(c, [lcpp, hf])) if pname == "bf16" else "—"
            label = f"{prec.name} (llama.cpp {prec.gguf_type}, colibri {colibri_mode(prec)})"
            out.append(f"| {label} | {t} | {fmt_ts(c)} | {fmt_ts(lcpp)} | {fmt_ts(hf)} "
                       f"| {fmt_ratio(paired_ratio(c, [lcpp]))} | {fmt_ratio(paired_ratio(c, [hf]))} | {best_peer} |")
    out.append("")
    out.append(f"t/s: best round (mean over {st['rounds']} rounds); each round's value is the run's average of "
               f"{st['reps']} repetitions; {st['threads']} threads. Ratios: per round, geometric mean over rounds.")
    out += [f"- {n}" for n in notes]
    return "\n".join(out) + "\n"


def notes_for(m: dict, col_status: str) -> list[str]:
    """Human-readable reasons for every missing cell of one model."""
    notes = [f"llama.cpp {p}: {f['error']}" for p, f in m["llama.cpp_files"].items() if "error" in f]
    if col_status:
        notes.append(f"colibri: missing — {col_status}")
    for pname, f in m["colibri_files"].items():
        notes += [f"{pname}: {f[k]}" for k in ("unsupported", "error") if k in f]
    notes += [f"{r['engine']} {r['precision']} round {r['round']}: missing — {r['error']}"
              for r in m["runs"] if "error" in r]
    return notes


def llama_build_commit(runs: list[dict]) -> str | None:
    for r in runs:
        for row in r.get("rows", []):
            if r["engine"] == "llama.cpp" and "build_commit" in row:
                return f"{row['build_commit']} (build {row.get('build_number', '?')})"
    return None


def header(doc: dict) -> str:
    """Command line, machine, versions, settings and machine load of a results document."""
    st, mach, ver = doc["settings"], doc["machine"], doc.get("versions", {})
    runs = [r for m in doc["models"] for r in m["runs"]]
    loads = [x for r in runs for x in r.get("loadavg_1m", [])]
    load = f"{min(loads):.1f} .. {max(loads):.1f} on {mach['cores']} cores" if loads else "?"
    commit = next((c for m in doc["models"] if (c := llama_build_commit(m["runs"]))), "?")
    return "\n".join([
        "## colibri peer comparison",
        "",
        f"- command: `{shlex.join(doc['argv'])}`",
        f"- date: {doc.get('date', '?')}",
        f"- machine: {mach['cpu']}, {mach['cores']} cores, {mach['mem_gib']} GiB; "
        f"SIMD flags: {' '.join(mach['simd_flags']) or 'none'}",
        f"- colibri: {ver.get('colibri', '?')}",
        f"- llama.cpp: build_commit {commit}; " + ver.get("llama.cpp", "?").replace("\n", "; "),
        f"- transformers: {ver.get('transformers', '?')}",
        f"- settings: -p {st['n_prompt']} -n {st['n_gen']} -t {st['threads']} -r {st['reps']}, "
        f"{st['rounds']} rounds",
        f"- machine load (1-min load average before/after each run): {load}",
        "",
    ])


def report(doc: dict) -> str:
    """The whole markdown report of a results document."""
    st = doc["settings"]
    tables = [model_table(m["model"], st, summarize(m["runs"], st["threads"], st.get("depth", 0)),
                          notes_for(m, doc.get("colibri_status", ""))) for m in doc["models"]]
    return header(doc) + "\n" + "\n".join(tables)


def write_results(path: Path, doc: dict) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_suffix(".tmp")
    tmp.write_text(json.dumps(doc, indent=2, default=str))
    tmp.replace(path)


# ------------------------------------------------------------------------------------------------
# driver
# ------------------------------------------------------------------------------------------------


def measure_model(name: str, a, llama: LlamaCpp, col_ok: bool, col_status: str) -> dict:
    """Steps 1-4 for one model, then delete its files (unless --keep)."""
    precs = [PRECISIONS[p] for p in a.precisions]
    outdir = a.work / name
    outdir.mkdir(parents=True, exist_ok=True)
    t0 = time.perf_counter()
    ckpt = make_checkpoint(name, a.work / "models")
    gguf = prepare_llamacpp(llama, ckpt, outdir, name, precs, a.threads)
    col = prepare_colibri(a.colibri, ckpt, outdir, name, precs) if col_ok else {}
    prep_s = time.perf_counter() - t0
    runs = run_rounds(a, llama, ckpt, gguf, col, col_ok)
    if not a.keep:
        log(f"{name}: deleting {ckpt} and {outdir}")
        shutil.rmtree(ckpt, ignore_errors=True)
        shutil.rmtree(outdir, ignore_errors=True)
    return {"model": name, "prepare_seconds": round(prep_s, 1), "llama.cpp_files": gguf, "colibri_files": col,
            "runs": runs}



def hf_versions() -> str:
    p = subprocess.run([sys.executable, "-c", "import torch, transformers; "
                        "print(f'transformers {transformers.__version__}, torch {torch.__version__}')"],
                       capture_output=True, text=True)
    return p.stdout.strip() or "?"


def new_document(a, argv: list[str], llama: LlamaCpp, col_status: str) -> dict:
    """The results document before any model: command, machine, versions, settings."""
    return {
        "argv": [sys.executable, sys.argv[0], *argv],
        "date": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
        "machine": machine_info(),
        "versions": {"colibri": colibri_version(a.colibri), "llama.cpp": llama.build_info(),
                     "transformers": "skipped" if a.skip_hf else hf_versions()},
        "colibri_status": col_status,
        "settings": {k: (str(v) if isinstance(v, Path) else v) for k, v in vars(a).items()},
        "models": [],
    }


def main(argv: list[str]) -> int:
    a = parse_args(argv)
    if a.report:
        print(report(json.loads(a.report.read_text())))
        return 0
    ensure_nice()
    a.work.mkdir(parents=True, exist_ok=True)
    _lock = lock_work_dir(a.work)  # noqa: F841  (kept open for the whole run)
    llama = LlamaCpp(a.llama_cpp)
    llama.ensure_built()
    col_ok, col_status = colibri_has_bench(a.colibri)
    if not col_ok:
        log(f"colibri will be reported missing: {col_status}")
    doc = new_document(a, argv, llama, col_status)
    for name in a.models:
        m = measure_model(name, a, llama, col_ok, col_status)
        m["summary"] = [{"precision": k[0], "engine": k[1], "test": k[2], **v}
                        for k, v in summarize(m["runs"], a.threads, a.depth).items()]
        doc["models"].append(m)
        write_results(a.out, doc)
        print(model_table(name, doc["settings"], summarize(m["runs"], a.threads, a.depth), notes_for(m, col_status)),
              flush=True)
    print("\n" + report(doc))
    print(f"raw results: {a.out}")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
