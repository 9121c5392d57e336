#!/usr/bin/env python3
"""PyTorch/transformers peer timing for bench/compare.py (never part of CI).

    /work/venv/bin/python bench/hf_bench.py CHECKPOINT_DIR [-p 512] [-n 64] [-t 2] [-r 3]

Loads a HuggingFace checkpoint in bfloat16 on the CPU with `torch.set_num_threads(t)` and measures,
with the same conventions as llama-bench:

  pp<p>: one forward call over p random token ids (no KV cache kept, logits of the last position
         only, like llama-bench), tokens/s = p / time;
  tg<n>: n forward calls of one token each, each reusing the KV cache of the previous ones, starting
         from an empty cache (llama-bench's tg: n single-token decodes), tokens/s = n / time.

One untimed warm-up of each test, then r timed repetitions. stdout: a JSON list shaped like
`llama-bench -o json` (n_prompt, n_gen, n_depth, n_threads, avg_ts, stddev_ts, samples_ts) plus
best_ts, load_s and the torch/transformers versions. Progress goes to stderr.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import time

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_VERBOSITY", "error")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")

import torch  # noqa: E402
import transformers  # noqa: E402
import transformers.modeling_outputs  # noqa: E402


def parse_args() -> argparse.Namespace:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("checkpoint", help="HuggingFace checkpoint directory")
    ap.add_argument("-p", "--n-prompt", type=int, default=512)
    ap.add_argument("-n", "--n-gen", type=int, default=64)
    ap.add_argument("-t", "--threads", type=int, default=2)
    ap.add_argument("-r", "--reps", type=int, default=3)
    ap.add_argument("--seed", type=int, default=0)
    return ap.parse_args()


def load_model(path: str) -> tuple[torch.nn.Module, float]:
    """Load the checkpoint in bf16 on the CPU, eval mode. Returns (model, seconds)."""
    t0 = time.perf_counter()
    model = transformers.AutoModelForCausalLM.from_pretrained(path, dtype=torch.bfloat16)
    model.eval()
    return model, time.perf_counter() - t0


def time_prompt(model, ids: torch.Tensor) -> float:
    """One forward over all of `ids` without keeping a cache; returns seconds."""
    t0 = time.perf_counter()
    model(input_ids=ids, use_cache=False, logits_to_keep=1)
    return time.perf_counter() - t0


def time_generate(model, ids: torch.Tensor) -> float:
    """len(ids) single-token forwards, each extending the KV cache; returns seconds."""
    cache = None
    t0 = time.perf_counter()
    for i in range(ids.shape[1]):
        out = model(input_ids=ids[:, i : i + 1], use_cache=True, **cache_kwarg(cache))
        cache = returned_cache(out)
    return time.perf_counter() - t0


# transformers 5.24 renamed the KV-cache argument and output field `past_key_values` -> `cache`
# (the old name still works but warns); use whichever this version has.
def cache_kwarg(cache) -> dict:
    if cache is None:
        return {}
    return {"cache": cache} if CACHE_NAME == "cache" else {"past_key_values": cache}


def returned_cache(out):
    c = getattr(out, "cache", None)
    return c if c is not None else getattr(out, "past_key_values", None)


CACHE_NAME = "cache" if hasattr(transformers.modeling_outputs.CausalLMOutputWithPast, "cache") else "past_key_values"


def run_test(name: str, fn, model, ids: torch.Tensor, reps: int) -> list[float]:
    """Warm up once, then time `reps` runs; returns tokens/s per run."""
    n = ids.shape[1]
    fn(model, ids)
    rates = []
    for r in range(reps):
        s = fn(model, ids)
        rates.append(n / s)
        print(f"hf_bench: {name} rep {r + 1}/{reps}: {n / s:.2f} t/s", file=sys.stderr)
    return rates


def row(n_prompt: int, n_gen: int, threads: int, rates: list[float], load_s: float) -> dict:
    """One result object in llama-bench's JSON shape (plus a few extras)."""
    return {
        "engine": "transformers",
        "type_k": "bf16",
        "model_type": "bf16",
        "n_prompt": n_prompt,
        "n_gen": n_gen,
        "n_depth": 0,
        "n_threads": threads,
        "avg_ts": statistics.fmean(rates),
        "stddev_ts": statistics.stdev(rates) if len(rates) > 1 else 0.0,
        "best_ts": max(rates),
        "samples_ts": rates,
        "load_s": load_s,
        "torch_version": torch.__version__,
        "transformers_version": transformers.__version__,
    }


def main() -> int:
    a = parse_args()
    torch.set_num_threads(a.threads)
    torch.manual_seed(a.seed)
    model, load_s = load_model(a.checkpoint)
    print(f"hf_bench: loaded {a.checkpoint} in {load_s:.1f} s ({a.threads} threads)", file=sys.stderr)
    vocab = model.config.vocab_size
    rows = []
    with torch.inference_mode():
        if a.n_prompt > 0:
            ids = torch.randint(0, vocab, (1, a.n_prompt))
            rates = run_test(f"pp{a.n_prompt}", time_prompt, model, ids, a.reps)
            rows.append(row(a.n_prompt, 0, a.threads, rates, load_s))
        if a.n_gen > 0:
            ids = torch.randint(0, vocab, (1, a.n_gen))
            rates = run_test(f"tg{a.n_gen}", time_generate, model, ids, a.reps)
            rows.append(row(0, a.n_gen, a.threads, rates, load_s))
    json.dump(rows, sys.stdout, indent=2)
    print()
    return 0


if __name__ == "__main__":
    sys.exit(main())
