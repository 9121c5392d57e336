#!/usr/bin/env python3
"""GGUF conversion throughput against `cat FILE > /dev/null` on the same cold file (issue 14:
`colibri convert` must stream at >= 0.7 of it, with peak RSS under 256 MB whatever the size).

    /work/venv/bin/python bench/convert_speed.py [--gb 2.3] [--rounds 2] [--work DIR] [--out-dir DIR] [--keep]
        [--colibri target/release/colibri] [--baseline OTHER/colibri]

Steps:
  1. (in a child process) a synthetic Mixtral-layout GGUF (`llama` arch with experts; Q8_0
     matrices, f32 norms and routers) of about --gb gigabytes, its metadata and tokenizer taken
     from the committed fixture tests/fixtures/gguf/mixtral_gqa.q8_0.gguf with the widths scaled
     up; the weights are one tiled block pattern with finite scales (conversion copies blocks, the
     values do not matter);
  2. per round: the file's pages are dropped from the page cache (posix_fadvise DONTNEED after
     fsync; no root needed), `cat FILE > /dev/null` is timed, the pages are dropped again, then
     `colibri convert FILE -o OUT` is timed (it ends with fsync + rename) with its peak RSS
     (wait4 rusage), then — cold again — a plain durable copy `dd if=FILE of=OUT bs=8M
     conv=fsync`, the floor for anything that reads the file and writes as much; OUT is deleted;
  3. with --baseline, the same for a second binary in each round (cat timed before each);
  4. a table: seconds and MB/s of each, convert / cat throughput, peak RSS, load average.
The GGUF is deleted at the end unless --keep.
"""
from __future__ import annotations

import argparse
import os
import subprocess
import sys
import time
from pathlib import Path

import numpy as np

REPO = Path(__file__).resolve().parent.parent
FIXTURE = REPO / "tests/fixtures/gguf/mixtral_gqa.q8_0.gguf"


def parse_args() -> argparse.Namespace:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--gb", type=float, default=2.3, help="approximate GGUF size in GB")
    ap.add_argument("--rounds", type=int, default=2)
    ap.add_argument("--work", type=Path, default=Path("/tmp/convert-speed"))
    ap.add_argument("--keep", action="store_true")
    ap.add_argument("--out-dir", type=Path,
                    help="where convert and dd write (default: --work); e.g. /dev/shm, to time the converter "
                         "apart from the device's write speed (the input stays cold on --work's device)")
    ap.add_argument("--colibri", type=Path, default=REPO / "target/release/colibri")
    ap.add_argument("--baseline", type=Path, help="a second colibri binary timed in each round too (A/B)")
    ap.add_argument("--make-only", type=Path, help=argparse.SUPPRESS)
    return ap.parse_args()


def q8_0_rows(rows: int, cols: int, pattern: np.ndarray) -> np.ndarray:
    """[rows, cols/32·34] bytes of Q8_0 blocks, tiled from `pattern`."""
    per_row = cols // 32 * 34
    need = rows * per_row
    reps = -(-need // pattern.size)
    return np.tile(pattern, reps)[:need].reshape(rows, per_row)


def make_gguf(path: Path, gb: float) -> None:
    import gguf

    src = gguf.GGUFReader(str(FIXTURE))
    hidden, ffn, experts, heads, kv_heads = 2048, 5632, 8, 16, 8
    layer_bytes = 3 * experts * ffn * hidden * 34 / 32 + 3 * hidden * hidden * 34 / 32
    layers = max(1, round(gb * 1e9 / layer_bytes))
    w = gguf.GGUFWriter(str(path), "llama")
    scaled = {
        "llama.block_count": layers, "llama.embedding_length": hidden,
        "llama.feed_forward_length": ffn, "llama.attention.head_count": heads,
        "llama.attention.head_count_kv": kv_heads, "llama.rope.dimension_count": hidden // heads,
    }
    for key, field in src.fields.items():
        if key.startswith("GGUF.") or key == "general.architecture":
            continue
        vtype = field.types[0]
        value = scaled.get(key, field.contents())
        sub = field.types[-1] if vtype == gguf.GGUFValueType.ARRAY else None
        w.add_key_value(key, value, vtype, sub_type=sub)
    rng = np.random.default_rng(0)
    scale = np.frombuffer(np.float16(0.01).tobytes(), np.uint8)
    pattern = np.concatenate([np.concatenate([scale, rng.integers(0, 256, 32, np.uint8)]) for _ in range(64)])
    vocab = int(src.fields["llama.vocab_size"].contents())
    kv_width = hidden // heads * kv_heads
    q8 = gguf.GGMLQuantizationType.Q8_0
    ones = lambda n: np.ones(n, np.float32)  # noqa: E731
    w.add_tensor("token_embd.weight", q8_0_rows(vocab, hidden, pattern), raw_dtype=q8)
    w.add_tensor("output_norm.weight", ones(hidden))
    w.add_tensor("output.weight", q8_0_rows(vocab, hidden, pattern), raw_dtype=q8)
    for i in range(layers):
        b = f"blk.{i}."
        for name, rows in (("attn_q", hidden), ("attn_k", kv_width), ("attn_v", kv_width), ("attn_output", hidden)):
            w.add_tensor(b + name + ".weight", q8_0_rows(rows, hidden, pattern), raw_dtype=q8)
        w.add_tensor(b + "attn_norm.weight", ones(hidden))
        w.add_tensor(b + "ffn_norm.weight", ones(hidden))
        w.add_tensor(b + "ffn_gate_inp.weight", rng.standard_normal((experts, hidden)).astype(np.float32))
        for name, rows, cols in (("ffn_gate_exps", ffn, hidden), ("ffn_up_exps", ffn, hidden), ("ffn_down_exps", hidden, ffn)):
            stack = q8_0_rows(experts * rows, cols, pattern).reshape(experts, rows, -1)
            w.add_tensor(b + name + ".weight", stack, raw_dtype=q8)
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()


def drop_cache(path: Path) -> None:
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
        os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_DONTNEED)
    finally:
        os.close(fd)


def timed(cmd: list[str]) -> tuple[float, int]:
    """Wall seconds and peak RSS (KiB on Linux) of one child process."""
    t0 = time.perf_counter()
    p = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    _, status, usage = os.wait4(p.pid, 0)
    dt = time.perf_counter() - t0
    err = p.stderr.read().decode(errors="replace") if p.stderr else ""
    if os.waitstatus_to_exitcode(status) != 0:
        sys.exit(f"{' '.join(cmd)} failed:\n{err}")
    return dt, usage.ru_maxrss


def main() -> None:
    a = parse_args()
    if a.make_only:
        return make_gguf(a.make_only, a.gb)
    a.work.mkdir(parents=True, exist_ok=True)
    gguf_path, out = a.work / "synthetic-q8_0.gguf", (a.out_dir or a.work) / "synthetic.colibri"
    if not gguf_path.exists():
        # In a child process: a forked child counts its parent's pages in ru_maxrss until it
        # execs, so the measuring process must stay small.
        subprocess.run([sys.executable, __file__, "--make-only", str(gguf_path), "--gb", str(a.gb)], check=True)
    size = gguf_path.stat().st_size
    print(f"file: {gguf_path} ({size / 1e9:.2f} GB), output: {out}")
    engines = [("colibri", a.colibri)] + ([("baseline", a.baseline)] if a.baseline else [])
    print("| round | engine | cat s (MB/s) | dd copy s (MB/s) | convert s (MB/s) | convert / cat | convert / copy "
          "| convert peak RSS | load |")
    print("|---|---|---:|---:|---:|---:|---:|---:|---:|")
    mbps = lambda t: size / t / 1e6  # noqa: E731
    try:
        for r in range(1, a.rounds + 1):
            for name, binary in engines:
                drop_cache(gguf_path)
                t_cat, _ = timed(["cat", str(gguf_path)])
                drop_cache(gguf_path)
                t_conv, rss = timed([str(binary), "convert", str(gguf_path), "-o", str(out)])
                out.unlink(missing_ok=True)
                drop_cache(gguf_path)
                t_copy, _ = timed(["dd", f"if={gguf_path}", f"of={out}", "bs=8M", "conv=fsync"])
                out.unlink(missing_ok=True)
                print(f"| {r} | {name} | {t_cat:.2f} ({mbps(t_cat):.0f}) | {t_copy:.2f} ({mbps(t_copy):.0f}) | "
                      f"{t_conv:.2f} ({mbps(t_conv):.0f}) | {t_cat / t_conv:.2f} | {t_copy / t_conv:.2f} | "
                      f"{rss / 1024:.1f} MiB | {os.getloadavg()[0]:.1f} |", flush=True)
    finally:
        out.unlink(missing_ok=True)
        if not a.keep:
            gguf_path.unlink(missing_ok=True)


if __name__ == "__main__":
    main()
