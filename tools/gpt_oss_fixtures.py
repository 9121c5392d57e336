"""GPT-OSS parts of tools/make_fixtures.py (imported by it; not run on its own): the experts' designed
weights, MXFP4 as the hub stores it (rounding to the FP4 grid, writing `*_blocks` / `*_scales`, loading it back
through transformers' own dequantiser) and the independent numpy forward pass that reads only the files.

MXFP4 here is transformers' (integrations/mxfp4.py): a block of 32 values along the input dimension of one
output row, 16 bytes with element 2i in the low nibble and 2i+1 in the high nibble of byte i, value =
FP4_VALUES[nibble] * 2^(scale - 127); scale = floor(log2 max|x|) - 2 + 127 (ggml's choice), each value rounded
to the nearest grid value (the first of the table on ties, as ggml's best_index_mxfp4).
"""

from __future__ import annotations

import json
import math
from pathlib import Path

import numpy as np
import torch

FP4 = np.array([0.0, 0.5, 1.0, 1.5, 2.0, 3.0, 4.0, 6.0, -0.0, -0.5, -1.0, -1.5, -2.0, -3.0, -4.0, -6.0])
EXPERTS = ("gate_up_proj", "down_proj")


def mxfp4_encode(w: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """w [..., rows, cols] (cols a multiple of 32) -> blocks [..., rows, cols/32, 16] u8, scales [..., rows, cols/32] u8."""
    b = w.reshape(*w.shape[:-1], w.shape[-1] // 32, 32).astype(np.float64)
    amax = np.abs(b).max(-1)
    with np.errstate(divide="ignore"):
        s = np.where(amax > 0, np.floor(np.log2(np.where(amax > 0, amax, 1))) - 2 + 127, 0).astype(np.int64)
    s = np.clip(s, 0, 254)
    d = np.ldexp(1.0, s - 127)[..., None]
    idx = np.abs(b[..., None] / d[..., None] - FP4).argmin(-1).astype(np.uint8)  # first on ties
    blocks = idx[..., 0::2] | (idx[..., 1::2] << 4)
    # C order: safetensors.numpy writes an array's memory as it lies.
    return np.ascontiguousarray(blocks, dtype=np.uint8), np.ascontiguousarray(s, dtype=np.uint8)


def mxfp4_decode(blocks: np.ndarray, scales: np.ndarray) -> np.ndarray:
    """The inverse view: [..., rows, groups, 16] + [..., rows, groups] -> [..., rows, groups * 32] (float64)."""
    lo, hi = FP4[blocks & 15], FP4[blocks >> 4]
    vals = np.stack([lo, hi], -1).reshape(*blocks.shape[:-1], 32)
    vals = vals * np.ldexp(1.0, scales.astype(np.int64) - 127)[..., None]
    return vals.reshape(*blocks.shape[:-2], -1)


def as_rows(name: str, p: np.ndarray) -> np.ndarray:
    """An expert parameter as [E, outputs, inputs] (transformers keeps them [E, inputs, outputs])."""
    assert name in EXPERTS
    return np.swapaxes(p, 1, 2)


@torch.no_grad()
def round_experts_to_mxfp4(model) -> None:
    """Every expert matrix replaced by its nearest MXFP4 values (so the hub's MXFP4 file holds it exactly)."""
    for layer in model.model.layers:
        ex = layer.mlp.experts
        for name in EXPERTS:
            p = getattr(ex, name)
            rows = as_rows(name, p.detach().double().numpy())
            q = np.swapaxes(mxfp4_decode(*mxfp4_encode(rows)), 1, 2)
            p.copy_(torch.from_numpy(q).to(p.dtype))


@torch.no_grad()
def design_experts(ex, nrm, put, Q, scale):
    """Random experts whose output stays out of the router subspace (Q), with small biases. transformers'
    layout: gate_up_proj [E, H, 2F] (gate = even outputs, up = odd), down_proj [E, F, H]."""
    E, H, twoF = ex.gate_up_proj.shape
    F = twoF // 2
    put(ex.gate_up_proj, np.swapaxes(nrm((E, twoF, H), 1.0 / math.sqrt(H)), 1, 2))
    put(ex.gate_up_proj_bias, nrm((E, twoF), 0.1))
    down = np.stack([Q @ nrm((H, F), scale / math.sqrt(F)) for _ in range(E)])  # [E, H, F]
    put(ex.down_proj, np.swapaxes(down, 1, 2))
    put(ex.down_proj_bias, np.stack([Q @ nrm(H, 0.2 * scale) for _ in range(E)]))


def write_mxfp4(model, out: Path) -> None:
    """Rewrite a saved f32 checkpoint as the hub ships GPT-OSS: experts as *_blocks / *_scales (u8), a
    quantization_config {quant_method: mxfp4} in config.json."""
    from safetensors.numpy import load_file, save_file

    path = out / "model.safetensors"
    sd = load_file(str(path))
    for i, layer in enumerate(model.model.layers):
        for name in EXPERTS:
            key = f"model.layers.{i}.mlp.experts.{name}"
            sd.pop(key)
            rows = as_rows(name, getattr(layer.mlp.experts, name).detach().double().numpy())
            blocks, scales = mxfp4_encode(rows)
            assert np.array_equal(mxfp4_decode(blocks, scales), rows), f"{key} is not on the MXFP4 grid"
            sd[key + "_blocks"], sd[key + "_scales"] = blocks, scales
    save_file(dict(sorted(sd.items())), str(path), metadata={"format": "pt"})
    cfg = json.loads((out / "config.json").read_text())
    cfg["quantization_config"] = {
        "modules_to_not_convert": ["model.layers.*.self_attn", "model.layers.*.mlp.router", "model.embed_tokens", "lm_head"],
        "quant_method": "mxfp4",
    }
    (out / "config.json").write_text(json.dumps(cfg, indent=2) + "\n")


def load_mxfp4(out: Path, model_cls, cfg_cls):
    """The MXFP4 checkpoint loaded with transformers' own dequantiser (integrations.mxfp4.convert_moe_packed_tensors,
    what from_pretrained runs with dequantize=True; from_pretrained itself needs accelerate, not installed here)."""
    from safetensors.torch import load_file
    from transformers.integrations.mxfp4 import convert_moe_packed_tensors

    cfg = json.loads((out / "config.json").read_text())
    cfg.pop("quantization_config")
    for k in ("architectures", "model_type", "transformers_version"):
        cfg.pop(k, None)
    model = model_cls(cfg_cls(**cfg))
    sd = load_file(str(out / "model.safetensors"))
    for key in [k for k in sd if k.endswith("_blocks")]:
        stem = key[: -len("_blocks")]
        sd[stem] = convert_moe_packed_tensors(sd.pop(key), sd.pop(stem + "_scales"), dtype=torch.float32)
    missing, unexpected = model.load_state_dict(sd, strict=False)
    assert not unexpected and set(missing) <= {"lm_head.weight"} - set(sd), (missing, unexpected)
    model.eval()
    return model


def read_weights(d: Path) -> dict:
    from safetensors import safe_open

    W = {}
    for f in sorted(d.glob("*.safetensors")):
        with safe_open(str(f), "pt") as fh:
            for key in fh.keys():
                t = fh.get_tensor(key)
                W[key] = t.numpy() if t.dtype == torch.uint8 else t.double().numpy()
    for key in [k for k in W if k.endswith("_blocks")]:  # MXFP4 -> [E, inputs, outputs] as transformers holds it
        stem = key[: -len("_blocks")]
        W[stem] = np.swapaxes(mxfp4_decode(W.pop(key), W.pop(stem + "_scales")), 1, 2)
    return W


def np_forward(d: Path, ids, rms, rope, rot):
    """modeling_gpt_oss in float64 numpy from the files alone: attention with q/k/v/o biases, sinks and each
    layer's window (layer_types), YaRN RoPE; router = softmax over the top-k of (W x + b); experts with biases
    and the clamped gate ((up + 1) * g * sigmoid(alpha g))."""
    c = json.loads((d / "config.json").read_text())
    W = read_weights(d)
    H, nh, nkv, hd = c["hidden_size"], c["num_attention_heads"], c["num_key_value_heads"], c["head_dim"]
    T, k, eps = len(ids), c["num_experts_per_tok"], c["rms_norm_eps"]
    alpha, limit = c.get("swiglu_alpha", 1.702), c.get("swiglu_limit", 7.0)
    cos, sin = rope(c, hd, T)
    x = W["model.embed_tokens.weight"][ids]
    routing = []
    for L in range(c["num_hidden_layers"]):
        p = f"model.layers.{L}."

        def lin(name, inp):
            return inp @ W[p + name + ".weight"].T + W[p + name + ".bias"]

        h = rms(x, W[p + "input_layernorm.weight"], eps)
        q = lin("self_attn.q_proj", h).reshape(T, nh, hd)
        kk = lin("self_attn.k_proj", h).reshape(T, nkv, hd)
        v = lin("self_attn.v_proj", h).reshape(T, nkv, hd)
        q = q * cos[:, None] + rot(q) * sin[:, None]
        kk = kk * cos[:, None] + rot(kk) * sin[:, None]
        kk, v = np.repeat(kk, nh // nkv, 1), np.repeat(v, nh // nkv, 1)
        sc = np.einsum("qhd,khd->hqk", q, kk) / math.sqrt(hd)
        qi, kj = np.arange(T)[:, None], np.arange(T)[None, :]
        mask = kj <= qi
        if c["layer_types"][L] == "sliding_attention":
            mask &= kj > qi - c["sliding_window"]
        sc = np.where(mask[None], sc, -np.inf)
        sink = W[p + "self_attn.sinks"][:, None, None]
        m = np.maximum(sc.max(-1, keepdims=True), sink)
        e = np.exp(sc - m)
        pr = e / (e.sum(-1, keepdims=True) + np.exp(sink - m))
        x = x + lin("self_attn.o_proj", np.einsum("hqk,khd->qhd", pr, v).reshape(T, nh * hd))
        h = rms(x, W[p + "post_attention_layernorm.weight"], eps)
        pre = p + "mlp."
        lg = h @ W[pre + "router.weight"].T + W[pre + "router.bias"]
        top = np.argsort(-lg, -1, kind="stable")[:, :k]
        tl = np.take_along_axis(lg, top, -1)
        tw = np.exp(tl - tl.max(-1, keepdims=True))
        tw /= tw.sum(-1, keepdims=True)
        routing.append(top.tolist())
        y = np.zeros_like(x)
        for t in range(T):
            for j in range(k):
                ei = top[t, j]
                gu = h[t] @ W[pre + "experts.gate_up_proj"][ei] + W[pre + "experts.gate_up_proj_bias"][ei]
                g, u = np.minimum(gu[0::2], limit), np.clip(gu[1::2], -limit, limit)
                a = (u + 1) * g / (1 + np.exp(-alpha * g))
                y[t] += tw[t, j] * (a @ W[pre + "experts.down_proj"][ei] + W[pre + "experts.down_proj_bias"][ei])
        x = x + y
    x = rms(x, W["model.norm.weight"], eps)
    return x @ W["lm_head.weight"].T, routing
