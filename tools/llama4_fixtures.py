"""Llama-4 pieces of tools/make_fixtures.py: the fixture specs, the experts' design in the hub's
transposed layout, the router hook's reading of `Llama4Router`'s output, and an independent float64
numpy forward pass read from the fixture files only (modeling_llama4 restated: NoPE layers with
the query temperature, chunked attention, the weightless q/k norm after RoPE on interleaved pairs,
the top-k logits' sigmoid multiplying the experts' inputs, the shared expert, dense layers)."""

import json
import math
from pathlib import Path

import numpy as np
import torch
from safetensors import safe_open

COMMON = dict(vocab_size=400, max_position_embeddings=4096, rms_norm_eps=1e-5, bos_token_id=None,
              eos_token_id=395, pad_token_id=395)

FIXTURES = [
    dict(
        name="llama4_chunked_nope",
        family="llama4",
        tokenizer="bytelevel_bpe",
        seed=20202,
        T=20,
        config=dict(
            COMMON, hidden_size=64, intermediate_size=16, intermediate_size_mlp=48, num_hidden_layers=4,
            num_attention_heads=4, num_key_value_heads=2, head_dim=16, num_local_experts=8, num_experts_per_tok=1,
            interleave_moe_layer_step=2, no_rope_layer_interval=4, attention_chunk_size=8,
            attn_temperature_tuning=True, floor_scale=4, attn_scale=0.5, use_qk_norm=True,
            tie_word_embeddings=False, rope_parameters={"rope_type": "default", "rope_theta": 10000.0},
        ),
        layout="hub", sharded=False, dtype="float32", config_style="transformers5",
        chat=None,
        notes="Llama-4 (Scout-like): interleave_moe_layer_step 2 (layers 1 and 3 MoE, 0 and 2 dense of "
        "intermediate_size_mlp 48), 8 experts top-1 (router: the largest logit, weight = its sigmoid, multiplying the "
        "expert's INPUT) + the shared expert; layer 3 NoPE (no_rope_layer_interval 4) with attention temperature "
        "(floor_scale 4, attn_scale 0.5: the query scale grows with the position); layers 0-2 RoPE on interleaved "
        "pairs, the weightless q/k RMSNorm after it, chunked attention of 8 with a 20-token input (and 37 in "
        "generation); GQA 4/2 heads of 16; the hub layout (feed_forward.experts.gate_up_proj [E, H, 2F], down_proj "
        "[E, F, H], feed_forward.router, feed_forward.shared_expert).",
    ),
    dict(
        name="llama4_moe_llama3_tied",
        family="llama4",
        tokenizer="bytelevel_bpe",
        seed=21212,
        T=20,
        config=dict(
            COMMON, hidden_size=48, intermediate_size=24, intermediate_size_mlp=40, num_hidden_layers=3,
            num_attention_heads=6, num_key_value_heads=2, head_dim=8, num_local_experts=6, num_experts_per_tok=2,
            interleave_moe_layer_step=1, no_rope_layers=[1, 0, 1], attention_chunk_size=64,
            attn_temperature_tuning=False, use_qk_norm=False, tie_word_embeddings=True,
            rope_parameters={"rope_type": "llama3", "rope_theta": 500000.0, "factor": 16.0, "low_freq_factor": 1.0,
                             "high_freq_factor": 1.0, "original_max_position_embeddings": 16},
        ),
        layout="hub", sharded=False, dtype="float32", config_style="transformers5",
        chat=None,
        notes="Llama-4 with every layer MoE (6 experts top-2, sigmoid weights on the inputs, shared expert), layer 1 "
        "NoPE without temperature tuning, no q/k norm, attention_chunk_size 64 (beyond every sequence here: no "
        "effect), llama3 RoPE scaling with low = high frequency factor (1, as Scout's config: no band between), "
        "factor 16 over 16 positions, GQA 6/2 heads of 8, tied embeddings.",
    ),
    dict(
        name="llama4_moe_layers_bf16",
        family="llama4",
        tokenizer="bytelevel_bpe",
        seed=22222,
        T=20,
        config=dict(
            COMMON, hidden_size=64, intermediate_size=32, intermediate_size_mlp=40, num_hidden_layers=4,
            num_attention_heads=4, num_key_value_heads=1, head_dim=16, num_local_experts=4, num_experts_per_tok=2,
            moe_layers=[0, 2], no_rope_layers=[1, 0, 1, 0], attention_chunk_size=5, attn_temperature_tuning=True,
            floor_scale=3, attn_scale=0.3, use_qk_norm=True, tie_word_embeddings=False,
            rope_parameters={"rope_type": "llama3", "rope_theta": 10000.0, "factor": 8.0, "low_freq_factor": 1.0,
                             "high_freq_factor": 4.0, "original_max_position_embeddings": 32},
        ),
        layout="hub", sharded=False, dtype="bfloat16", config_style="transformers5",
        chat=None,
        notes="Llama-4 with explicit moe_layers [0, 2] (1 and 3 dense), two NoPE layers (1, 3) with temperature "
        "(floor_scale 3, attn_scale 0.3), chunks of 5 on the RoPE layers 0 and 2 (a 20-token input spans 4), 4 experts "
        "top-2, MQA 4/1 heads of 16, llama3 RoPE with a smoothed band (factor 8, frequency factors 1 and 4 over 32), "
        "bf16 checkpoint.",
    ),
]


def design_experts(ex, nrm, put, Q, H, scale):
    """Experts as the other families' (gate/up rows at unit gain, down inside Q), stored transposed:
    gate_up_proj [E, H, 2F] (gate = columns :F, up = F:), down_proj [E, F, H]."""
    E, _, two_f = ex.gate_up_proj.shape
    F = two_f // 2
    gate_up = nrm((E, two_f, H), 1.0 / math.sqrt(H))
    down = np.stack([Q @ nrm((H, F), scale / math.sqrt(F)) for _ in range(E)])
    put(ex.gate_up_proj, gate_up.transpose(0, 2, 1))
    put(ex.down_proj, down.transpose(0, 2, 1))


def router_record(mod, out):
    """(logits, chosen weights, chosen ids) of a `Llama4Router` call: it returns the scores (the
    chosen logits' sigmoid, 0 elsewhere) and the logits; the chosen are the top-k logits."""
    scores, logits = out
    idx = torch.topk(logits, mod.top_k, dim=-1).indices
    return logits, scores.gather(-1, idx), idx


def load(cls, out: Path):
    """The fixture in f32 with eager attention (Llama-4's experts have one implementation)."""
    m = cls.from_pretrained(str(out), dtype=torch.float32, attn_implementation="eager")
    m.eval()
    return m


def _rope_inv(c, hd):
    rp = c["rope_parameters"]
    inv = 1.0 / (rp["rope_theta"] ** (np.arange(0, hd, 2) / hd))
    if rp.get("rope_type") == "llama3":  # _compute_llama3_parameters
        f, lo, hi, om = rp["factor"], rp["low_freq_factor"], rp["high_freq_factor"], rp["original_max_position_embeddings"]
        wl = 2 * math.pi / inv
        scaled = np.where(wl > om / lo, inv / f, inv)
        if hi > lo:
            smooth = (om / wl - lo) / (hi - lo)
            medium = (wl >= om / hi) & (wl <= om / lo)
            scaled = np.where(medium, (1 - smooth) * scaled / f + smooth * scaled, scaled)
        inv = scaled
    return inv


def _rot_pairs(x, cos, sin):
    """(x[2i] + i·x[2i+1]) · e^{iθ} for x [T, heads, hd]: Llama-4's complex-pair RoPE."""
    out = np.empty_like(x)
    c, s = cos[:, None, :], sin[:, None, :]
    out[..., 0::2] = x[..., 0::2] * c - x[..., 1::2] * s
    out[..., 1::2] = x[..., 1::2] * c + x[..., 0::2] * s
    return out


def _rms(x, eps):
    return x / np.sqrt((x * x).mean(-1, keepdims=True) + eps)


def _silu(x):
    return x / (1 + np.exp(-x))


def _attention(c, W, p, h, L, cos, sin):
    nh, nkv, hd, T, eps = c["num_attention_heads"], c["num_key_value_heads"], c["head_dim"], h.shape[0], c["rms_norm_eps"]
    q = (h @ W[p + "self_attn.q_proj.weight"].T).reshape(T, nh, hd)
    k = (h @ W[p + "self_attn.k_proj.weight"].T).reshape(T, nkv, hd)
    v = (h @ W[p + "self_attn.v_proj.weight"].T).reshape(T, nkv, hd)
    if c["no_rope_layers"][L]:
        q, k = _rot_pairs(q, cos, sin), _rot_pairs(k, cos, sin)
        if c["use_qk_norm"]:
            q, k = _rms(q, eps), _rms(k, eps)
    elif c["attn_temperature_tuning"]:
        scale = np.log1p(np.floor((np.arange(T) + 1.0) / c["floor_scale"])) * c["attn_scale"] + 1.0
        q = q * scale[:, None, None]
    k, v = np.repeat(k, nh // nkv, 1), np.repeat(v, nh // nkv, 1)
    sc = np.einsum("qhd,khd->hqk", q, k) * hd**-0.5
    qi, kj = np.arange(T)[:, None], np.arange(T)[None, :]
    mask = kj <= qi
    if c["layer_types"][L] == "chunked_attention":
        mask &= kj // c["attention_chunk_size"] == qi // c["attention_chunk_size"]
    sc = np.where(mask[None], sc, -np.inf)
    sc = np.exp(sc - sc.max(-1, keepdims=True))
    sc /= sc.sum(-1, keepdims=True)
    return np.einsum("hqk,khd->qhd", sc, v).reshape(T, -1) @ W[p + "self_attn.o_proj.weight"].T


def _ffn(c, W, ff, h):
    """The layer's dense MLP, or its MoE block (routed experts on weighted inputs + shared expert)."""
    mlp = lambda pre: (_silu(h @ W[pre + "gate_proj.weight"].T) * (h @ W[pre + "up_proj.weight"].T)) @ W[pre + "down_proj.weight"].T  # noqa: E731
    if ff + "router.weight" not in W:
        return mlp(ff), None
    k = c["num_experts_per_tok"]
    lg = h @ W[ff + "router.weight"].T
    top = np.argsort(-lg, -1, kind="stable")[:, :k]
    w = 1 / (1 + np.exp(-np.take_along_axis(lg, top, -1)))
    gu, dn = W[ff + "experts.gate_up_proj"], W[ff + "experts.down_proj"]
    F = dn.shape[1]
    y = mlp(ff + "shared_expert.")
    for t in range(h.shape[0]):
        for j in range(k):
            xin = h[t] * w[t, j]
            e = top[t, j]
            y[t] += (_silu(xin @ gu[e][:, :F]) * (xin @ gu[e][:, F:])) @ dn[e]
    return y, top.tolist()


def np_forward(d: Path, ids):
    """Logits [T, V] and per-layer routing (None for dense layers) of fixture `d` over `ids`."""
    c = json.loads((d / "config.json").read_text())
    W = {}
    for f in sorted(d.glob("*.safetensors")):
        with safe_open(str(f), "pt") as fh:
            for key in fh.keys():
                W[key] = fh.get_tensor(key).double().numpy()
    T, eps = len(ids), c["rms_norm_eps"]
    ang = np.arange(T)[:, None] * _rope_inv(c, c["head_dim"])[None, :]
    cos, sin = np.cos(ang), np.sin(ang)
    x = W["model.embed_tokens.weight"][ids]
    routing = []
    for L in range(c["num_hidden_layers"]):
        p = f"model.layers.{L}."
        x = x + _attention(c, W, p, _rms(x, eps) * W[p + "input_layernorm.weight"], L, cos, sin)
        y, rt = _ffn(c, W, p + "feed_forward.", _rms(x, eps) * W[p + "post_attention_layernorm.weight"])
        x = x + y
        routing.append(rt)
    x = _rms(x, eps) * W["model.norm.weight"]
    return x @ W.get("lm_head.weight", W["model.embed_tokens.weight"]).T, routing
