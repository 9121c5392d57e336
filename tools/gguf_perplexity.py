#!/usr/bin/env python3
"""Perplexity parity of colibri and llama.cpp on llama.cpp-made GGUF files of the trained default
model (issue 14): every GGUF block type colibri imports, same file, same text, same chunks.

    /work/venv/bin/python tools/gguf_perplexity.py --corpus kjv.txt [--types Q8_0,Q4_K_M] \
        [--ctx 256] [--threads 2] [--json out.json] [--keep DIR]

Steps, all in a temporary directory deleted at the end (unless --keep):
1. the shipped models/default.colibri (bf16) is written back as a HuggingFace checkpoint, bit for
   bit (its tensors under transformers' Mixtral names as bf16 safetensors, with the config.json,
   tokenizer.json and tokenizer_config.json the .colibri file stores);
2. llama.cpp's convert_hf_to_gguf.py makes DEFAULT-BF16.gguf of it (the converter refuses
   tokenizers whose pre-tokenizer hash it does not know: this byte-level BPE one has GPT-2's
   split regex, so the detection is told "gpt-2"), and llama-quantize makes one GGUF per type;
3. `colibri convert X.gguf -o X.colibri` for each;
4. the text: the chapters train_default.py held out (the last 15 of the KJV), scored by
   `llama-perplexity -c CTX` and `colibri perplexity -c CTX` — both split the tokens into
   non-overlapping chunks of CTX and score the second half of each chunk — with KL divergence
   against the BF16 file (llama-perplexity --kl-divergence-base / --kl-divergence; colibri
   --kl-base), and colibri once more with COLIBRI_QUANT_ACT=float (float activations).
Prints a markdown table: PPL of each engine, colibri/llama.cpp − 1, KL of both.
"""
import argparse
import json
import os
import re
import shutil
import struct
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
LLAMA_SRC = "/work/llama/llama_cpp_python-0.3.36/vendor/llama.cpp"
LLAMA_BIN = "/work/llama/build/bin"
TYPES = ["Q8_0", "Q5_1", "Q5_0", "Q4_1", "Q4_0", "IQ4_NL", "Q6_K", "Q5_K_M", "Q5_K_S", "Q4_K_M",
         "Q4_K_S", "IQ4_XS", "Q3_K_M", "Q3_K_S", "Q2_K"]
BF16 = 2  # colibri dtype id
STACK = 2  # colibri tensor kind: expert stack


def read_colibri(path):
    """(metadata {key: bytes}, [(name, dtype, shape, [bytes of each expert, or of the tensor])])
    of a .colibri file (docs/format.md)."""
    with open(path, "rb") as f:
        b = f.read()
    if b[:4] != b"COLI":
        sys.exit(f"{path}: not a .colibri file")
    meta_off, = struct.unpack_from("<Q", b, 0x28)
    table_off, _, strings_off = struct.unpack_from("<QQQ", b, 0x38)
    count, = struct.unpack_from("<I", b, 0x14)
    meta = {}
    for i in range(struct.unpack_from("<I", b, meta_off)[0]):
        klen, _, koff, voff, vlen = struct.unpack_from("<IIQQQ", b, meta_off + 8 + 32 * i)
        meta[b[meta_off + koff:meta_off + koff + klen].decode()] = b[meta_off + voff:meta_off + voff + vlen]
    tensors = []
    for i in range(count):
        r = table_off + 96 * i
        noff, nlen, dtype, ndim = struct.unpack_from("<IIII", b, r)
        dims = struct.unpack_from("<4Q", b, r + 16)[:ndim]
        off, length, stride = struct.unpack_from("<QQQ", b, r + 48)
        kind, = struct.unpack_from("<I", b, r + 84)
        name = b[strings_off + noff:strings_off + noff + nlen].decode()
        if kind == STACK:
            one = length - stride * (dims[0] - 1)
            parts = [b[off + e * stride:off + e * stride + one] for e in range(dims[0])]
        else:
            parts = [b[off:off + length]]
        tensors.append((name, dtype, list(dims), parts))
    return meta, tensors


def hf_name(name, expert):
    """transformers' Mixtral name of colibri tensor `name` (expert `expert` of a stack)."""
    if name == "tok_embeddings":
        return "model.embed_tokens.weight"
    if name == "norm":
        return "model.norm.weight"
    m = re.fullmatch(r"layers\.(\d+)\.(.+)", name)
    if not m:
        sys.exit(f"unexpected tensor {name}")
    p = f"model.layers.{m[1]}."
    rest = {"attn_norm": "input_layernorm.weight", "ffn_norm": "post_attention_layernorm.weight",
            "moe.router": "block_sparse_moe.gate.weight"}
    if m[2] in rest:
        return p + rest[m[2]]
    if m[2].startswith("attn."):
        return p + f"self_attn.{m[2][5:]}_proj.weight"
    w = {"moe.experts.gate": "w1", "moe.experts.down": "w2", "moe.experts.up": "w3"}[m[2]]
    return p + f"block_sparse_moe.experts.{expert}.{w}.weight"


def export_hf(colibri, out):
    """Write the bf16 Mixtral .colibri file `colibri` as a HuggingFace checkpoint in `out`."""
    meta, tensors = read_colibri(colibri)
    out.mkdir(parents=True, exist_ok=True)
    (out / "config.json").write_bytes(meta["hf_config"])
    (out / "tokenizer.json").write_bytes(meta["tokenizer"])
    (out / "tokenizer_config.json").write_bytes(meta["tokenizer_config"])
    if "generation_config" in meta:
        (out / "generation_config.json").write_bytes(meta["generation_config"])
    header, blobs, pos = {}, [], 0
    for name, dtype, shape, parts in tensors:
        if dtype != BF16:
            sys.exit(f"{colibri}: {name} is not bf16 (dtype {dtype}); export needs a bf16 file")
        for e, data in enumerate(parts):
            one = shape[1:] if len(parts) > 1 else shape
            header[hf_name(name, e)] = {"dtype": "BF16", "shape": one, "data_offsets": [pos, pos + len(data)]}
            blobs.append(data)
            pos += len(data)
    head = json.dumps(header, separators=(",", ":")).encode()
    head += b" " * (-len(head) % 8)
    with open(out / "model.safetensors", "wb") as f:
        f.write(struct.pack("<Q", len(head)) + head)
        for blob in blobs:
            f.write(blob)


def hf_to_gguf(hf_dir, out, outtype, llama_src):
    """llama.cpp's convert_hf_to_gguf.py, in this process, with the pre-tokenizer named gpt-2."""
    sys.path.insert(0, str(Path(llama_src) / "gguf-py"))
    sys.path.insert(0, llama_src)
    import convert_hf_to_gguf as conv
    from conversion import base
    base.TextModel.get_vocab_base_pre = lambda self, tokenizer: "gpt-2"
    sys.argv = ["convert_hf_to_gguf.py", str(hf_dir), "--outtype", outtype, "--outfile", str(out)]
    conv.main()


def run(cmd, env=None):
    """Run `cmd`; its stdout and stderr, or exit with them on failure."""
    p = subprocess.run([*map(str, cmd)], capture_output=True, text=True,
                       env={**os.environ, **(env or {})})
    if p.returncode != 0:
        sys.exit(f"failed ({p.returncode}): {' '.join(map(str, cmd))}\n{p.stderr[-3000:]}")
    return p.stdout, p.stderr


LINGER_C = """#include <unistd.h>
__attribute__((destructor)) static void linger(void) { usleep(500000); }
"""


def linger_library(work):
    """A shared library whose destructor sleeps 0.5 s at process exit (built once into `work`
    with the system C compiler), for LD_PRELOAD: other threads keep running meanwhile."""
    so = work / "linger.so"
    if not so.exists():
        (work / "linger.c").write_text(LINGER_C)
        run(["cc", "-shared", "-fPIC", "-O2", "-o", so, work / "linger.c"])
    return str(so)


def llama_ppl(a, gguf, text, kl_base=None, save_base=None):
    """llama-perplexity's final PPL (and mean KL with kl_base) on `gguf`."""
    cmd = [f"{a.llama_bin}/llama-perplexity", "-m", gguf, "-f", text, "-c", a.ctx, "-t", a.threads]
    if save_base:
        cmd += ["--kl-divergence-base", save_base]
    if kl_base:
        cmd += ["--kl-divergence-base", kl_base, "--kl-divergence"]
    env = {"LD_LIBRARY_PATH": a.llama_bin, "LD_PRELOAD": linger_library(Path(kl_base or save_base).parent)}
    for _ in range(3):
        # llama.cpp's log singleton is leaked on purpose, so its writer thread may not have
        # printed the last lines when the process exits (the summary goes missing under load,
        # exit status 0): `linger_library` delays the exit, and a run without them is repeated.
        out, err = run(cmd, env)
        log = out + err
        if re.search(r"Final estimate|Same top p:", log):
            break
    r = {}
    if kl_base:
        r["ppl"] = float(re.search(r"Mean PPL\(Q\)\s*:\s*([\d.]+)", log)[1])
        r["kl"] = float(re.search(r"Mean\s+KLD:\s*([-\d.e]+)", log)[1])
        r["top1"] = float(re.search(r"Same top p:\s*([\d.]+)", log)[1]) / 100
    else:
        r["ppl"] = float(re.search(r"Final estimate: PPL = ([\d.]+)", log)[1])
    r["chunks"] = int(re.search(r"calculating perplexity over (\d+) chunks", log)[1]) if not kl_base else None
    return r


def colibri_ppl(a, model, text, kl_base, quant_act=None):
    """colibri perplexity's JSON on `model` against `kl_base`."""
    cmd = [a.colibri, "perplexity", "-m", model, "-f", text, "-c", a.ctx, "-t", a.threads, "-o", "json"]
    if kl_base:
        cmd += ["--kl-base", kl_base]
    out, _ = run(cmd, {"COLIBRI_QUANT_ACT": quant_act} if quant_act else None)
    j = json.loads(out)
    r = {"ppl": j["ppl"], "chunks": j["n_chunks"], "scored": j["n_scored"]}
    if j.get("kl"):
        r["kl"], r["top1"] = j["kl"]["kl_mean"], j["kl"]["top1_agreement"]
    return r


def held_out_text(corpus, out):
    """The 15 chapters train_default.py holds out (its load_chapters), as one text."""
    text = Path(corpus).read_text()
    chapters = [c.strip("\n") + "\n" for c in text.split("\n\n") if c.strip()]
    out.write_text("\n".join(chapters[-15:]))


def measure(a, work, text):
    """Every row of the table: [type, llama ppl, colibri ppl, colibri float-act ppl, kls...]."""
    hf = work / "hf"
    export_hf(a.model, hf)
    bf16 = work / "default-BF16.gguf"
    hf_to_gguf(hf, bf16, "bf16", a.llama_src)
    shutil.rmtree(hf)
    base_logits = work / "bf16.kld"
    base_colibri = work / "default-BF16.colibri"
    run([a.colibri, "convert", bf16, "-o", base_colibri, "--no-progress"])
    rows = []
    ref = llama_ppl(a, bf16, text, save_base=base_logits)
    rows.append({"type": "BF16", "llama": ref, "colibri": colibri_ppl(a, base_colibri, text, None),
                 "colibri_float": colibri_ppl(a, base_colibri, text, None, "float")})
    print(json.dumps(rows[-1]), file=sys.stderr)
    if ref["chunks"] != rows[0]["colibri"]["chunks"]:
        sys.exit(f"llama-perplexity made {ref['chunks']} chunks, colibri {rows[0]['colibri']['chunks']}: "
                 "the two tokenisations of the text differ in length")
    for t in a.types:
        g, c = work / f"default-{t}.gguf", work / f"default-{t}.colibri"
        run([f"{a.llama_bin}/llama-quantize", bf16, g, t, a.threads], {"LD_LIBRARY_PATH": a.llama_bin})
        run([a.colibri, "convert", g, "-o", c, "--no-progress"])
        row = {"type": t, "bytes": g.stat().st_size,
               "llama": llama_ppl(a, g, text, kl_base=base_logits),
               "colibri": colibri_ppl(a, c, text, base_colibri),
               "colibri_float": colibri_ppl(a, c, text, base_colibri, "float")}
        print(json.dumps(row), file=sys.stderr)
        rows.append(row)
        g.unlink()
        c.unlink()
    return rows


def table(rows):
    out = ["| type | bits/weight | PPL llama.cpp | PPL colibri | **Δ** | PPL colibri, float act. | Δ | "
           "KL llama.cpp | KL colibri | KL colibri, float act. | top-1 llama.cpp / colibri |",
           "|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---|"]
    params = 9_709_824
    for r in rows:
        ll, co, cf = r["llama"], r["colibri"], r["colibri_float"]
        bpw = f"{8 * r['bytes'] / params:.2f}" if "bytes" in r else "16 (file)"
        d, df = co["ppl"] / ll["ppl"] - 1, cf["ppl"] / ll["ppl"] - 1
        kl = lambda x: f"{x['kl']:.5f}" if "kl" in x and x["kl"] is not None else "—"
        top = f"{100 * ll['top1']:.2f} / {100 * co['top1']:.2f} %" if "top1" in ll else "—"
        out.append(f"| {r['type']} | {bpw} | {ll['ppl']:.4f} | {co['ppl']:.4f} | **{100 * d:+.3f} %** | "
                   f"{cf['ppl']:.4f} | {100 * df:+.3f} % | {kl(ll)} | {kl(co)} | {kl(cf)} | {top} |")
    return "\n".join(out)


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--corpus", help="the KJV text of tools/get_default_corpus.sh")
    ap.add_argument("--text", help="score this text instead of the corpus's held-out chapters")
    ap.add_argument("--model", default=str(ROOT / "models/default.colibri"))
    ap.add_argument("--types", default=",".join(TYPES))
    ap.add_argument("--ctx", type=int, default=256)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--colibri", default=str(ROOT / "target/release/colibri"))
    ap.add_argument("--llama-src", default=LLAMA_SRC)
    ap.add_argument("--llama-bin", default=LLAMA_BIN)
    ap.add_argument("--json", help="also write the raw figures here")
    ap.add_argument("--keep", help="work in this directory and keep it")
    a = ap.parse_args()
    a.types = [t for t in a.types.split(",") if t]
    if not (a.corpus or a.text):
        ap.error("give --corpus (tools/get_default_corpus.sh) or --text")
    work = Path(a.keep) if a.keep else Path(tempfile.mkdtemp(prefix="gguf-ppl-"))
    work.mkdir(parents=True, exist_ok=True)
    try:
        text = Path(a.text) if a.text else work / "held-out.txt"
        if not a.text:
            held_out_text(a.corpus, text)
        rows = measure(a, work, text)
    finally:
        if not a.keep:
            shutil.rmtree(work, ignore_errors=True)
    if a.json:
        Path(a.json).write_text(json.dumps(rows, indent=1) + "\n")
    print(table(rows))


if __name__ == "__main__":
    main()
