#!/usr/bin/env python3
"""Time to first token with and without `colibri serve`'s prompt cache, for requests sharing a
long prefix (a system prompt / chat history) on a benchmark model with a 4,096-token context.

Makes (in a temporary directory, deleted at the end) a random-weight Mixtral-shaped checkpoint
(numpy + safetensors, no torch): hidden 1024, 8 layers, 16 heads / 4 KV heads, 8 experts top-2,
expert FFN 1536, vocab 32000, context 4096; converts it to bf16 with `colibri convert`; starts two
servers (default prompt cache, and `--prompt-cache 0`) and sends, to each, requests made of one
shared prefix of PREFIX tokens + a distinct suffix of 16 tokens, max_tokens 1 (the response
time is then the time to the first token). Prints a table: first request (cold), then the mean
and min of the following ones, for each server, and their ratio.

    python3 tools/prompt_cache_ttft.py [--prefix 2000] [--requests 5] [--threads 2]
        [--colibri target/release/colibri] [--keep DIR]
"""

from __future__ import annotations

import argparse
import json
import shutil
import socket
import subprocess
import sys
import tempfile
import time
import urllib.error
import urllib.request
from pathlib import Path

import numpy as np
from safetensors.numpy import save_file

REPO = Path(__file__).resolve().parent.parent
SHAPE = dict(hidden=1024, layers=8, heads=16, kv_heads=4, experts=8, top_k=2, ffn=1536, vocab=32000, ctx=4096)


def make_checkpoint(out: Path, seed: int = 0) -> None:
    s = SHAPE
    rng = np.random.default_rng(seed)
    h, hd = s["hidden"], s["hidden"] // s["heads"]

    def w(*shape: int) -> np.ndarray:
        return (rng.standard_normal(shape, dtype=np.float32) * 0.02).astype(np.float16)

    t = {"model.embed_tokens.weight": w(s["vocab"], h), "lm_head.weight": w(s["vocab"], h),
         "model.norm.weight": np.ones(h, np.float16)}
    for l in range(s["layers"]):
        p = f"model.layers.{l}."
        t[p + "input_layernorm.weight"] = np.ones(h, np.float16)
        t[p + "post_attention_layernorm.weight"] = np.ones(h, np.float16)
        t[p + "self_attn.q_proj.weight"] = w(h, h)
        t[p + "self_attn.k_proj.weight"] = w(s["kv_heads"] * hd, h)
        t[p + "self_attn.v_proj.weight"] = w(s["kv_heads"] * hd, h)
        t[p + "self_attn.o_proj.weight"] = w(h, h)
        t[p + "block_sparse_moe.gate.weight"] = w(s["experts"], h)
        for e in range(s["experts"]):
            q = f"{p}block_sparse_moe.experts.{e}."
            t[q + "w1.weight"] = w(s["ffn"], h)
            t[q + "w3.weight"] = w(s["ffn"], h)
            t[q + "w2.weight"] = w(h, s["ffn"])
    out.mkdir(parents=True, exist_ok=True)
    save_file(t, str(out / "model.safetensors"))
    config = {
        "architectures": ["MixtralForCausalLM"], "model_type": "mixtral", "hidden_act": "silu",
        "hidden_size": h, "intermediate_size": s["ffn"], "num_hidden_layers": s["layers"],
        "num_attention_heads": s["heads"], "num_key_value_heads": s["kv_heads"],
        "num_local_experts": s["experts"], "num_experts_per_tok": s["top_k"],
        "max_position_embeddings": s["ctx"], "rms_norm_eps": 1e-5, "vocab_size": s["vocab"],
        "rope_parameters": {"rope_type": "default", "rope_theta": 1e6}, "sliding_window": None,
        "tie_word_embeddings": False, "bos_token_id": 1, "eos_token_id": 2, "torch_dtype": "float16",
    }
    (out / "config.json").write_text(json.dumps(config, indent=1))
    # A small tokenizer (400 ids, below the vocabulary): the requests send ids it knows.
    fixture = REPO / "tests/fixtures/models/mixtral_gqa"
    for f in ("tokenizer.json", "tokenizer_config.json"):
        shutil.copy(fixture / f, out / f)


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def start(colibri: str, model: Path, threads: int, extra: list[str]) -> tuple[subprocess.Popen, str]:
    port = free_port()
    p = subprocess.Popen([colibri, "serve", "-m", str(model), "--port", str(port), "-t", str(threads), *extra],
                         stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    url = f"http://127.0.0.1:{port}"
    for _ in range(600):
        try:
            urllib.request.urlopen(url + "/health", timeout=1).read()
            return p, url
        except OSError:
            time.sleep(0.1)
    p.kill()
    raise SystemExit("the server did not start")


def ttft(url: str, prompt: list[int]) -> tuple[float, int]:
    body = json.dumps({"prompt": [prompt], "max_tokens": 1, "temperature": 0}).encode()
    req = urllib.request.Request(url + "/v1/completions", body, {"Content-Type": "application/json"})
    t0 = time.perf_counter()
    try:
        r = json.loads(urllib.request.urlopen(req, timeout=600).read())
    except urllib.error.HTTPError as e:
        raise SystemExit(f"the server answered {e.code}: {e.read()[:300]!r}")
    return time.perf_counter() - t0, r["usage"].get("prompt_tokens_details", {}).get("cached_tokens", 0)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--prefix", type=int, default=2000)
    ap.add_argument("--requests", type=int, default=5)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--colibri", default=str(REPO / "target/release/colibri"))
    ap.add_argument("--keep", type=Path, help="make the model here and keep it (default: a temp dir)")
    a = ap.parse_args()
    work = a.keep or Path(tempfile.mkdtemp(prefix="colibri-ttft-"))
    try:
        model = work / "ttft.colibri"
        if not model.exists():
            make_checkpoint(work / "hf")
            subprocess.run([a.colibri, "convert", str(work / "hf"), "-o", str(model), "--dtype", "bf16"], check=True,
                           stdout=subprocess.DEVNULL)
            shutil.rmtree(work / "hf")
        rng = np.random.default_rng(1)
        prefix = [int(x) for x in rng.integers(3, 400, a.prefix)]
        prompts = [prefix + [int(x) for x in rng.integers(3, 400, 16)] for _ in range(a.requests + 1)]
        rows = {}
        for name, extra in (("prompt cache", []), ("no cache (--prompt-cache 0)", ["--prompt-cache", "0"])):
            p, url = start(a.colibri, model, a.threads, extra)
            try:
                rows[name] = [ttft(url, q) for q in prompts]
            finally:
                p.terminate()
                p.wait()
        cpu = next((l.split(":", 1)[1].strip() for l in open("/proc/cpuinfo") if l.startswith("model name")), "?")
        print(f"CPU: {cpu}; {a.threads} threads; model {SHAPE}; prefix {a.prefix} + 16 tokens, max_tokens 1")
        print(f"{'server':32} {'first (s)':>10} {'later mean (s)':>15} {'later min (s)':>14} {'cached tokens':>14}")
        for name, r in rows.items():
            later = [t for t, _ in r[1:]]
            print(f"{name:32} {r[0][0]:10.3f} {sum(later) / len(later):15.3f} {min(later):14.3f} {r[-1][1]:14d}")
        on, off = ([t for t, _ in r[1:]] for r in rows.values())
        print(f"time to first token, no cache / cache (means of later requests): {sum(off) / sum(on):.1f}x")
    finally:
        if not a.keep:
            shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    sys.exit(main())
