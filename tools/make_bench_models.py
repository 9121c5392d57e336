#!/usr/bin/env python3
"""Generate the large random-weight benchmark checkpoints (never committed).

    /work/venv/bin/python tools/make_bench_models.py --list
    /work/venv/bin/python tools/make_bench_models.py mixtral-2l                 # -> /work/bench-models/mixtral-2l/
    /work/venv/bin/python tools/make_bench_models.py qwen2moe-4l olmoe-4l --out /tmp/bm
    /work/venv/bin/python tools/make_bench_models.py all --shard-size 2GB --verify-load

Each model is a HuggingFace checkpoint directory with real published MoE shapes and only a few
layers:

    name          shapes of                 layers  params (total / active*)   bf16 on disk
    mixtral-2l    Mixtral-8x7B              2       3.16 B / 0.92 B             6.3 GB
    qwen2moe-4l   Qwen1.5-MoE-A2.7B         4       2.41 B / 0.41 B             4.8 GB
    olmoe-4l      OLMoE-1B-7B               4       1.88 B / 0.37 B             3.8 GB

    and DeepSeek-V2-Lite, GPT-OSS-20B (MXFP4 experts) and Qwen3-Next-80B-A3B: tools/bench_families.py.

    * active as colibri counts it: without the embedding table (one row is read per token).

Directory contents (what `save_pretrained` would write, hub layout):
  config.json                      written by the transformers Config class itself (save_pretrained)
  generation_config.json           written by transformers' GenerationConfig.save_pretrained
  model-0000i-of-0000N.safetensors bf16, sharded like transformers/huggingface_hub (greedy, in order,
                                   at --shard-size, default 2GB = 2e9 bytes), metadata {"format": "pt"}
  model.safetensors.index.json     {"metadata": {"total_parameters", "total_size"}, "weight_map"}
                                   (or a single model.safetensors when everything fits one shard)
  tokenizer.model                  a SentencePiece BPE model trained here (--tokenizer-vocab, default 8000)
  tokenizer.json                   its Llama/Mixtral-style fast-tokenizer conversion (legacy form: Prepend +
                                   Replace normalizer, byte fallback, "<s> $A" template), cross-checked
                                   against the sentencepiece library on the training text
  tokenizer_config.json            LlamaTokenizer settings + the Mixtral [INST] chat template

Tensor names are the hub (per-expert) layout of each family: Mixtral
`block_sparse_moe.experts.{e}.w1/w2/w3`, Qwen2-MoE `mlp.experts.{e}.gate_proj/up_proj/down_proj`
plus `mlp.shared_expert.*` and `mlp.shared_expert_gate`, OLMoE `mlp.experts.{e}.*` plus
`self_attn.q_norm/k_norm`. Before writing anything the script checks its tensor list against
transformers: (1) the parameter count of the real model class built on the meta device, and
(2) the names and shapes that transformers' own `save_pretrained` writes for a tiny twin config
(same family, layers, experts and flags; tiny widths).

Weights: every tensor is drawn directly in bf16 with torch (`normal_(0, 0.02)`, seeded per
tensor), RMSNorm weights are ones, and the routing matrices (router `gate`, Qwen2-MoE
`shared_expert_gate`) use std 1/sqrt(hidden) instead of 0.02 so that, on an RMS-normalised
input, every router logit has std ~1: top-k choices differ from token to token and the softmax
is neither saturated nor uniform (routing is not degenerate). Memory: only one shard (<= the
shard size) plus one tensor is ever held, so peak RSS is ~shard size + the largest tensor,
never the model. A shard is written with safetensors.torch.save_file and released.

The tokenizer's vocabulary (8000 by default) is smaller than the models' (32000 / 50304): ids past
it simply have no token, like the padded vocabularies of real checkpoints.

Training text: /usr/share/common-licenses (Debian base-files; symlinks de-duplicated) plus any
--corpus FILE given. Everything is seeded: reruns give the same files on the same machine.

Options: --out DIR (default /work/bench-models), --shard-size (2GB), --seed, --tokenizer-vocab,
--corpus FILE..., --force (overwrite an existing model dir), --no-check (skip the transformers
name/count checks), --verify-load (after writing: load the checkpoint with transformers in bf16,
run a 16-token forward pass, report expert usage; transformers peaks at ~2x the model in RAM).
"""

from __future__ import annotations

import argparse
import hashlib
import io
import json
import math
import os
import shutil
import tempfile
import time
from pathlib import Path

os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("HF_HUB_DISABLE_PROGRESS_BARS", "1")
os.environ.setdefault("TRANSFORMERS_VERBOSITY", "error")

import torch  # noqa: E402
import sentencepiece as spm  # noqa: E402
import transformers  # noqa: E402
from safetensors import safe_open  # noqa: E402
from safetensors.torch import save_file  # noqa: E402
from tokenizers import AddedToken, Tokenizer, decoders, models, normalizers, processors  # noqa: E402
from transformers import (  # noqa: E402
    GenerationConfig,
    MixtralConfig,
    MixtralForCausalLM,
    OlmoeConfig,
    OlmoeForCausalLM,
    Qwen2MoeConfig,
    Qwen2MoeForCausalLM,
)

import bench_families  # noqa: E402  (tools/, next to this script)
from bench_families import logical_params, n_experts, nbytes  # noqa: E402

transformers.logging.set_verbosity_error()

DEFAULT_OUT = Path("/work/bench-models")
CORPUS_DIR = Path("/usr/share/common-licenses")

# --------------------------------------------------------------------------------------
# The models
# --------------------------------------------------------------------------------------
# Special tokens follow the (Llama-style) SentencePiece tokenizer every model gets: <unk>=0 <s>=1 </s>=2.
MODELS = {
    "mixtral-2l": dict(
        family="mixtral",
        config_cls=MixtralConfig,
        model_cls=MixtralForCausalLM,
        like="Mixtral-8x7B-v0.1",
        config=dict(
            vocab_size=32000, hidden_size=4096, intermediate_size=14336, num_hidden_layers=2,
            num_attention_heads=32, num_key_value_heads=8, num_local_experts=8, num_experts_per_tok=2,
            max_position_embeddings=32768, rms_norm_eps=1e-5, sliding_window=None,
            rope_parameters={"rope_type": "default", "rope_theta": 1e6}, router_aux_loss_coef=0.02,
            tie_word_embeddings=False, bos_token_id=1, eos_token_id=2,
        ),
        expect=(3.16e9, 0.92e9),
    ),
    "qwen2moe-4l": dict(
        family="qwen2_moe",
        config_cls=Qwen2MoeConfig,
        model_cls=Qwen2MoeForCausalLM,
        like="Qwen1.5-MoE-A2.7B",
        config=dict(
            vocab_size=32000, hidden_size=2048, intermediate_size=5632, moe_intermediate_size=1408,
            shared_expert_intermediate_size=5632, num_hidden_layers=4, num_attention_heads=16,
            num_key_value_heads=16, num_experts=60, num_experts_per_tok=4, decoder_sparse_step=1,
            mlp_only_layers=[], norm_topk_prob=False, max_position_embeddings=8192, rms_norm_eps=1e-6,
            rope_parameters={"rope_type": "default", "rope_theta": 1e6}, use_sliding_window=False,
            sliding_window=32768, max_window_layers=21, qkv_bias=True, router_aux_loss_coef=0.001,
            tie_word_embeddings=False, bos_token_id=1, eos_token_id=2,
        ),
        expect=(2.41e9, 0.41e9),
    ),
    "olmoe-4l": dict(
        family="olmoe",
        config_cls=OlmoeConfig,
        model_cls=OlmoeForCausalLM,
        like="OLMoE-1B-7B-0924",
        config=dict(
            vocab_size=50304, hidden_size=2048, intermediate_size=1024, num_hidden_layers=4,
            num_attention_heads=16, num_key_value_heads=16, num_experts=64, num_experts_per_tok=8,
            norm_topk_prob=False, max_position_embeddings=4096, rms_norm_eps=1e-5, clip_qkv=None,
            rope_parameters={"rope_type": "default", "rope_theta": 10000.0}, router_aux_loss_coef=0.01,
            tie_word_embeddings=False, bos_token_id=1, eos_token_id=2, pad_token_id=None,
        ),
        expect=(1.88e9, 0.37e9),
    ),
}

MODELS.update(bench_families.MODELS)

MIXTRAL_TEMPLATE = (
    "{{ bos_token }}{% for message in messages %}"
    "{% if (message['role'] == 'user') != (loop.index0 % 2 == 0) %}"
    "{{ raise_exception('Conversation roles must alternate user/assistant/user/assistant/...') }}{% endif %}"
    "{% if message['role'] == 'user' %}{{ '[INST] ' + message['content'] + ' [/INST]' }}"
    "{% elif message['role'] == 'assistant' %}{{ message['content'] + eos_token }}"
    "{% else %}{{ raise_exception('Only user and assistant roles are supported!') }}{% endif %}{% endfor %}"
)


def log(msg: str) -> None:
    print(f"[{time.time() - T0:7.1f}s] {msg}", flush=True)


T0 = time.time()
UMASK = os.umask(0)
os.umask(UMASK)


# --------------------------------------------------------------------------------------
# Tensor list (hub layout) from a config
# --------------------------------------------------------------------------------------
def hf_tensors(family: str, cfg) -> list[tuple[str, tuple[int, ...], str]]:
    """(name, shape, init) for every tensor of the hub-layout checkpoint, in state-dict order.
    init is one of: normal (std 0.02), ones, router (std 1/sqrt(hidden)); bench_families adds zeros,
    mxfp4 and scales."""
    if family in bench_families.TINY:
        return bench_families.hf_tensors(family, cfg)
    H, V, L = cfg.hidden_size, cfg.vocab_size, cfg.num_hidden_layers
    nh, nkv = cfg.num_attention_heads, cfg.num_key_value_heads
    hd = getattr(cfg, "head_dim", None) or H // nh
    out: list[tuple[str, tuple[int, ...], str]] = [("model.embed_tokens.weight", (V, H), "normal")]
    for l in range(L):
        p = f"model.layers.{l}"
        a = f"{p}.self_attn"
        out += [
            (f"{a}.q_proj.weight", (nh * hd, H), "normal"),
            (f"{a}.k_proj.weight", (nkv * hd, H), "normal"),
            (f"{a}.v_proj.weight", (nkv * hd, H), "normal"),
            (f"{a}.o_proj.weight", (H, nh * hd), "normal"),
        ]
        if family == "qwen2_moe" and cfg.qkv_bias:
            out += [(f"{a}.q_proj.bias", (nh * hd,), "normal"), (f"{a}.k_proj.bias", (nkv * hd,), "normal"),
                    (f"{a}.v_proj.bias", (nkv * hd,), "normal")]
        if family == "olmoe":
            out += [(f"{a}.q_norm.weight", (nh * hd,), "ones"), (f"{a}.k_norm.weight", (nkv * hd,), "ones")]
        if family == "mixtral":
            m = f"{p}.block_sparse_moe"
            E, F = cfg.num_local_experts, cfg.intermediate_size
            out.append((f"{m}.gate.weight", (E, H), "router"))
            for e in range(E):
                out += [(f"{m}.experts.{e}.w1.weight", (F, H), "normal"), (f"{m}.experts.{e}.w2.weight", (H, F), "normal"),
                        (f"{m}.experts.{e}.w3.weight", (F, H), "normal")]
        else:
            m = f"{p}.mlp"
            E = cfg.num_experts
            F = cfg.moe_intermediate_size if family == "qwen2_moe" else cfg.intermediate_size
            sparse = True
            if family == "qwen2_moe":
                sparse = l not in (cfg.mlp_only_layers or []) and E > 0 and (l + 1) % cfg.decoder_sparse_step == 0
            if sparse:
                out.append((f"{m}.gate.weight", (E, H), "router"))
                for e in range(E):
                    out += [(f"{m}.experts.{e}.gate_proj.weight", (F, H), "normal"),
                            (f"{m}.experts.{e}.up_proj.weight", (F, H), "normal"),
                            (f"{m}.experts.{e}.down_proj.weight", (H, F), "normal")]
                if family == "qwen2_moe" and cfg.shared_expert_intermediate_size > 0:
                    Fs = cfg.shared_expert_intermediate_size
                    out += [(f"{m}.shared_expert.gate_proj.weight", (Fs, H), "normal"),
                            (f"{m}.shared_expert.up_proj.weight", (Fs, H), "normal"),
                            (f"{m}.shared_expert.down_proj.weight", (H, Fs), "normal"),
                            (f"{m}.shared_expert_gate.weight", (1, H), "router")]
            else:
                Fd = cfg.intermediate_size
                out += [(f"{m}.gate_proj.weight", (Fd, H), "normal"), (f"{m}.up_proj.weight", (Fd, H), "normal"),
                        (f"{m}.down_proj.weight", (H, Fd), "normal")]
        out += [(f"{p}.input_layernorm.weight", (H,), "ones"), (f"{p}.post_attention_layernorm.weight", (H,), "ones")]
    out.append(("model.norm.weight", (H,), "ones"))
    if not cfg.tie_word_embeddings:
        out.append(("lm_head.weight", (V, H), "normal"))
    return out


def colibri_counts(family: str, cfg, tensors) -> tuple[int, int]:
    """Total and active parameters the way colibri counts them (model/names.rs param_count):
    routed experts count top_k/E, the embedding table is not active unless tied."""
    E = n_experts(family, cfg)
    k = cfg.num_experts_per_tok
    total = active = experts = 0
    for name, shape, init in tensors:
        n = logical_params(shape, init)
        total += n
        if ".experts." in name:
            experts += n
        elif name == "model.embed_tokens.weight" and not cfg.tie_word_embeddings:
            pass
        else:
            active += n
    return total, active + experts * k // E


# --------------------------------------------------------------------------------------
# Checks against transformers
# --------------------------------------------------------------------------------------
def tiny_twin(spec) -> dict:
    """Same family, layers, experts, top-k and flags; tiny widths (heads keep their GQA ratio)."""
    c = dict(spec["config"])
    if spec["family"] in bench_families.TINY:
        return dict(c, **bench_families.TINY[spec["family"]])
    ratio = c["num_attention_heads"] // c["num_key_value_heads"]
    c.update(hidden_size=32, num_attention_heads=4, num_key_value_heads=4 // ratio if ratio <= 4 else 1, vocab_size=64,
             intermediate_size=12)
    if spec["family"] == "qwen2_moe":
        c.update(moe_intermediate_size=8, shared_expert_intermediate_size=10)
    return c


def check_against_transformers(name: str, spec) -> None:
    cfg_cls, model_cls, fam = spec["config_cls"], spec["model_cls"], spec["family"]
    # (1) parameter count of the real model class, built on the meta device (no memory)
    cfg = cfg_cls(**spec["config"])
    with torch.device("meta"):
        m = model_cls(cfg)
    n_tf = sum(p.numel() for p in m.parameters())
    n_ours = sum(logical_params(s, i) for _, s, i in hf_tensors(fam, cfg))
    if n_tf != n_ours:
        raise SystemExit(f"{name}: transformers' {model_cls.__name__} has {n_tf} parameters, our tensor list {n_ours}")
    del m
    # (2) names and shapes transformers' own save_pretrained writes, for a tiny twin
    tcfg = cfg_cls(**tiny_twin(spec))
    torch.manual_seed(0)
    tm = model_cls(tcfg)
    with tempfile.TemporaryDirectory() as td:
        tm.save_pretrained(td)
        written = {}
        for f in sorted(Path(td).glob("*.safetensors")):
            with safe_open(str(f), "pt") as fh:
                for key in fh.keys():
                    written[key] = tuple(fh.get_slice(key).get_shape())
    ours = bench_families.as_saved(fam, hf_tensors(fam, tcfg))
    if written != ours:
        only_tf = sorted(set(written) - set(ours))[:8]
        only_us = sorted(set(ours) - set(written))[:8]
        shape = sorted(k for k in set(ours) & set(written) if ours[k] != written[k])[:8]
        raise SystemExit(f"{name}: tensor names/shapes differ from transformers' save_pretrained: "
                         f"only transformers {only_tf}, only ours {only_us}, shape differs {shape}")
    log(f"  check: {model_cls.__name__} on meta = {n_tf:,} params = ours; names+shapes = save_pretrained's "
        f"({len(written)} tensors in the tiny twin)")


# --------------------------------------------------------------------------------------
# Tokenizer
# --------------------------------------------------------------------------------------
def corpus_lines(extra: list[str]) -> list[str]:
    seen, lines = set(), []
    paths = sorted(CORPUS_DIR.iterdir()) if CORPUS_DIR.is_dir() else []
    paths += [Path(p) for p in extra]
    for p in paths:
        real = p.resolve()
        if real in seen or not real.is_file():
            continue
        seen.add(real)
        lines += [ln for ln in real.read_text(encoding="utf-8", errors="replace").splitlines() if ln.strip()]
    if not lines:
        raise SystemExit(f"no training text: {CORPUS_DIR} is missing; pass --corpus FILE")
    return lines


def build_tokenizer(vocab_size: int, extra_corpus: list[str]):
    """Train a SentencePiece BPE model with Llama's trainer settings; convert it the way
    transformers' LlamaConverter / SpmConverter does (legacy Llama tokenizer.json as in the
    Mixtral hub files). Returns (model_bytes, tokenizer_json_text, n_mismatch, n_checked)."""
    lines = corpus_lines(extra_corpus)
    buf = io.BytesIO()
    spm.SentencePieceTrainer.train(
        sentence_iterator=iter(lines), model_writer=buf, model_type="bpe", vocab_size=vocab_size,
        byte_fallback=True, character_coverage=1.0, add_dummy_prefix=True, normalization_rule_name="identity",
        remove_extra_whitespaces=False, split_digits=True, allow_whitespace_only_pieces=True,
        unk_id=0, bos_id=1, eos_id=2, pad_id=-1, num_threads=1, minloglevel=2, max_sentence_length=100000,
    )
    model_bytes = buf.getvalue()
    sp = spm.SentencePieceProcessor(model_proto=model_bytes)
    n = sp.get_piece_size()
    vocab = {sp.id_to_piece(i): i for i in range(n)}
    assert vocab["<unk>"] == 0 and vocab["<s>"] == 1 and vocab["</s>"] == 2 and vocab["<0x00>"] == 3
    # merges like SpmConverter: every split of a normal piece into two normal pieces, ranked by
    # the merged piece's score (higher first), ties by id
    normal = {sp.id_to_piece(i): (sp.get_score(i), i) for i in range(n)
              if not (sp.is_byte(i) or sp.is_control(i) or sp.is_unknown(i))}
    ranked = []
    for tok, (score, idx) in normal.items():
        for s in range(1, len(tok)):
            left, right = tok[:s], tok[s:]
            if left in normal and right in normal:
                ranked.append((-score, idx, left, right))
    merges = [(lft, rgt) for _, _, lft, rgt in sorted(ranked)]
    tok = Tokenizer(models.BPE(vocab=vocab, merges=merges, unk_token="<unk>", fuse_unk=True, byte_fallback=True, dropout=None))
    tok.normalizer = normalizers.Sequence([normalizers.Prepend("▁"), normalizers.Replace(" ", "▁")])
    tok.pre_tokenizer = None
    tok.decoder = decoders.Sequence([decoders.Replace("▁", " "), decoders.ByteFallback(), decoders.Fuse(), decoders.Strip(" ", 1, 0)])
    tok.add_special_tokens([AddedToken(t, special=True, normalized=False) for t in ("<unk>", "<s>", "</s>")])
    tok.post_processor = processors.TemplateProcessing(single="<s> $A", pair="<s> $A <s>:1 $B:1", special_tokens=[("<s>", 1)])
    js = json.loads(tok.to_str())
    js["model"]["merges"] = [f"{a} {b}" for a, b in js["model"]["merges"]]  # hub files: "left right" strings
    text = json.dumps(js, ensure_ascii=False, indent=2)
    tok2 = Tokenizer.from_str(text)
    # cross-check against the sentencepiece library
    sample = lines[:: max(1, len(lines) // 2000)]
    bad = sum(1 for ln in sample if tok2.encode(ln, add_special_tokens=False).ids != sp.encode(ln))
    return model_bytes, text, bad, len(sample)


def tokenizer_config() -> dict:
    added = {str(i): {"content": t, "lstrip": False, "normalized": False, "rstrip": False, "single_word": False, "special": True}
             for t, i in (("<unk>", 0), ("<s>", 1), ("</s>", 2))}
    return {
        "add_bos_token": True,
        "add_eos_token": False,
        "added_tokens_decoder": added,
        "bos_token": "<s>",
        "chat_template": MIXTRAL_TEMPLATE,
        "clean_up_tokenization_spaces": False,
        "eos_token": "</s>",
        "legacy": True,
        "model_max_length": 1000000000000000019884624838656,
        "pad_token": None,
        "sp_model_kwargs": {},
        "spaces_between_special_tokens": False,
        "tokenizer_class": "LlamaTokenizer",
        "unk_token": "<unk>",
        "use_default_system_prompt": False,
    }


# --------------------------------------------------------------------------------------
# Weights
# --------------------------------------------------------------------------------------
def parse_size(s: str) -> int:
    from transformers.utils.hub import convert_file_size_to_int

    return convert_file_size_to_int(int(s) if s.isdigit() else s)


def plan_shards(tensors, limit: int) -> list[list[tuple[str, tuple[int, ...], str]]]:
    """huggingface_hub's split: in order; a tensor larger than the limit gets its own shard;
    otherwise start a new shard when the tensor would tip the current one over the limit."""
    shards, cur, cur_size = [], [], 0
    for t in tensors:
        size = nbytes(t[1], t[2])
        if size > limit:
            shards.append([t])
            continue
        if cur and cur_size + size > limit:
            shards.append(cur)
            cur, cur_size = [], 0
        cur.append(t)
        cur_size += size
    if cur:
        shards.append(cur)
    return shards


def make_tensor(name: str, shape, init: str, seed: int) -> torch.Tensor:
    if init in ("ones", "zeros"):
        return (torch.ones if init == "ones" else torch.zeros)(shape, dtype=torch.bfloat16)
    h = int.from_bytes(hashlib.sha256(f"{seed}:{name}".encode()).digest()[:8], "little") & ((1 << 63) - 1)
    g = torch.Generator().manual_seed(h)
    if init in ("mxfp4", "scales"):  # random FP4 codes; e8m0 scales 2^-8 .. 2^-6
        lo, hi = (0, 256) if init == "mxfp4" else (119, 122)
        return torch.randint(lo, hi, shape, dtype=torch.uint8, generator=g)
    std = 0.02 if init == "normal" else 1.0 / math.sqrt(shape[-1])
    return torch.empty(shape, dtype=torch.bfloat16).normal_(0.0, std, generator=g)


def rss_mb() -> float:
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) / 1024
    return float("nan")


def write_weights(out: Path, tensors, shard_limit: int, seed: int) -> tuple[int, int]:
    shards = plan_shards(tensors, shard_limit)
    total_bytes = sum(nbytes(s, i) for _, s, i in tensors)
    total_params = sum(math.prod(s) for _, s, _ in tensors)
    names = (["model.safetensors"] if len(shards) == 1
             else [f"model-{i + 1:05d}-of-{len(shards):05d}.safetensors" for i in range(len(shards))])
    weight_map = {}
    done = 0
    t_start = time.time()
    for fname, shard in zip(names, shards):
        part = {}
        for name, shape, init in shard:
            part[name] = make_tensor(name, shape, init, seed)
            weight_map[name] = fname
        save_file(part, str(out / fname), metadata={"format": "pt"})
        os.chmod(out / fname, 0o666 & ~UMASK)  # safetensors creates 0600 files; use the usual umask
        size = sum(t.numel() * t.element_size() for t in part.values())
        done += size
        peak = rss_mb()
        del part
        rate = done / 1e6 / max(1e-9, time.time() - t_start)
        log(f"  {fname}: {len(shard)} tensors, {size / 1e9:.2f} GB ({done / total_bytes:5.1%}, {rate:.0f} MB/s, RSS {peak:.0f} MB)")
    if len(shards) > 1:
        index = {"metadata": {"total_parameters": total_params, "total_size": total_bytes},
                 "weight_map": dict(sorted(weight_map.items()))}
        (out / "model.safetensors.index.json").write_text(json.dumps(index, indent=2, sort_keys=True) + "\n")
    return total_params, total_bytes


# --------------------------------------------------------------------------------------
# Optional: load with transformers
# --------------------------------------------------------------------------------------
@torch.no_grad()
def verify_load(out: Path, spec) -> None:
    from transformers import AutoModelForCausalLM, AutoTokenizer

    tok = AutoTokenizer.from_pretrained(str(out))
    ids = tok("The Licensor grants you a license to use the Work, free of charge.", return_tensors="pt").input_ids[:, :16]
    t = time.time()
    model = AutoModelForCausalLM.from_pretrained(str(out), dtype=torch.bfloat16)
    model.eval()
    log(f"  verify: transformers loaded {type(model).__name__} in {time.time() - t:.1f}s (RSS {rss_mb():.0f} MB)")
    picks = {}

    def hook(i):
        def fn(mod, inp, outp):
            picks[i] = outp[2] if isinstance(outp, tuple) and len(outp) == 3 else None

        return fn

    hs = []
    for i, layer in enumerate(model.model.layers):
        gate = getattr(getattr(layer, "mlp", None), "gate", None) or getattr(getattr(layer, "block_sparse_moe", None), "gate", None)
        if gate is not None:
            hs.append(gate.register_forward_hook(hook(i)))
    t = time.time()
    logits = model(input_ids=ids, use_cache=False).logits
    for h in hs:
        h.remove()
    assert torch.isfinite(logits.float()).all(), "non-finite logits"
    log(f"  verify: forward of {ids.shape[1]} tokens in {time.time() - t:.1f}s, logits finite, std {logits.float().std():.3f}")
    for i, idx in sorted(picks.items()):
        if idx is None:
            continue
        used = torch.unique(idx).numel()
        sets = len({tuple(sorted(r)) for r in idx.tolist()})
        log(f"  verify: layer {i}: {used} distinct experts used, {sets} distinct top-k sets over {idx.shape[0]} tokens")
    del model


# --------------------------------------------------------------------------------------
def build(name: str, args, tok_files) -> None:
    spec = MODELS[name]
    out = Path(args.out) / name
    if out.exists():
        if not args.force:
            raise SystemExit(f"{out} exists (pass --force to overwrite)")
        shutil.rmtree(out)
    cfg_kwargs = dict(spec["config"], dtype="bfloat16", architectures=[spec["model_cls"].__name__])
    cfg = spec["config_cls"](**cfg_kwargs)
    tensors = hf_tensors(spec["family"], cfg)
    total, active = colibri_counts(spec["family"], cfg, tensors)
    size = sum(nbytes(s, i) for _, s, i in tensors)
    log(f"{name}: {spec['like']} shapes, {cfg.num_hidden_layers} layers, {len(tensors)} tensors, "
        f"{total / 1e9:.3f} B params ({active / 1e9:.3f} B active), {size / 1e9:.2f} GB -> {out}")
    for want, got, what in ((spec["expect"][0], total, "total"), (spec["expect"][1], active, "active")):
        if abs(got - want) > 0.006e9:
            raise SystemExit(f"{name}: {what} params {got / 1e9:.3f} B, expected ~{want / 1e9:.2f} B")
    if not args.no_check:
        check_against_transformers(name, spec)
    free = shutil.disk_usage(out.parent if out.parent.exists() else Path(args.out).parent).free
    if free < size * 1.05:
        raise SystemExit(f"{name}: needs {size / 1e9:.1f} GB, only {free / 1e9:.1f} GB free")
    tmp = out.with_name(out.name + ".partial")
    if tmp.exists():
        shutil.rmtree(tmp)
    tmp.mkdir(parents=True)
    cfg.save_pretrained(str(tmp))
    if any(i == "mxfp4" for _, _, i in tensors):  # the hub's GPT-OSS config says how the experts are stored
        cj = json.loads((tmp / "config.json").read_text())
        cj["quantization_config"] = bench_families.MXFP4_CONFIG
        (tmp / "config.json").write_text(json.dumps(cj, indent=2, sort_keys=True) + "\n")
    GenerationConfig(bos_token_id=1, eos_token_id=2).save_pretrained(str(tmp))
    model_bytes, tok_text, tok_cfg = tok_files
    (tmp / "tokenizer.model").write_bytes(model_bytes)
    (tmp / "tokenizer.json").write_text(tok_text + "\n", encoding="utf-8")
    (tmp / "tokenizer_config.json").write_text(json.dumps(tok_cfg, indent=2, ensure_ascii=False) + "\n", encoding="utf-8")
    t = time.time()
    _, written = write_weights(tmp, tensors, parse_size(args.shard_size), args.seed)
    assert written == size
    tmp.rename(out)
    log(f"{name}: wrote {written / 1e9:.2f} GB in {time.time() - t:.1f}s")
    if args.verify_load:
        verify_load(out, spec)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0], formatter_class=argparse.RawDescriptionHelpFormatter,
                                 epilog="models: " + ", ".join(MODELS) + " (or 'all')")
    ap.add_argument("models", nargs="*", help="model names (see --list), or 'all'")
    ap.add_argument("--out", default=str(DEFAULT_OUT), help=f"output directory (default {DEFAULT_OUT})")
    ap.add_argument("--list", action="store_true", help="list the models and exit")
    ap.add_argument("--shard-size", default="2GB", help="max shard size, transformers syntax (default 2GB = 2e9 bytes)")
    ap.add_argument("--seed", type=int, default=1234)
    ap.add_argument("--tokenizer-vocab", type=int, default=8000)
    ap.add_argument("--corpus", nargs="*", default=[], help="extra plain-text files for the tokenizer")
    ap.add_argument("--force", action="store_true", help="overwrite existing model directories")
    ap.add_argument("--no-check", action="store_true", help="skip the checks against transformers")
    ap.add_argument("--verify-load", action="store_true", help="load each written checkpoint with transformers")
    args = ap.parse_args()
    if args.list or not args.models:
        for name, spec in MODELS.items():
            cfg = spec["config_cls"](**spec["config"])
            tensors = hf_tensors(spec["family"], cfg)
            total, active = colibri_counts(spec["family"], cfg, tensors)
            print(f"{name:12s} {spec['like']} shapes, {cfg.num_hidden_layers} layers: {total / 1e9:.2f} B params "
                  f"({active / 1e9:.2f} B active), {sum(nbytes(s, i) for _, s, i in tensors) / 1e9:.1f} GB")
        if not args.models:
            return
    names = list(MODELS) if args.models == ["all"] else args.models
    unknown = [n for n in names if n not in MODELS]
    if unknown:
        raise SystemExit(f"unknown model(s) {unknown}; choose from {list(MODELS)} or 'all'")
    torch.set_num_threads(max(1, os.cpu_count() or 1))
    log(f"torch {torch.__version__}, transformers {transformers.__version__}")
    model_bytes, tok_text, bad, checked = build_tokenizer(args.tokenizer_vocab, args.corpus)
    log(f"tokenizer: SentencePiece BPE, {args.tokenizer_vocab} pieces; tokenizer.json == sentencepiece on "
        f"{checked - bad}/{checked} sampled lines")
    Path(args.out).mkdir(parents=True, exist_ok=True)
    for name in names:
        build(name, args, (model_bytes, tok_text, tokenizer_config()))


if __name__ == "__main__":
    main()
