"""Benchmark shapes of the newer MoE families for tools/make_bench_models.py (imported by it; not run on
its own): DeepSeek-V2-Lite (multi-head latent attention), GPT-OSS-20B (MXFP4 experts, as the hub ships
them) and Qwen3-Next-80B-A3B (Gated DeltaNet + gated full attention).

    name                 shapes of            layers                          params total / active   file
    deepseek-v2-lite-3l  DeepSeek-V2-Lite     3 (1 dense + 2 MoE)             1.67 B / 0.46 B          3.3 GB bf16
    gpt-oss-20b-4l       GPT-OSS-20B          4 (sliding, full, sliding, full) 4.45 B / 1.08 B          4.2 GB (MXFP4 experts)
    qwen3-next-4l        Qwen3-Next-80B-A3B   4 (3 DeltaNet + 1 full attn.)   2.38 B / 0.58 B          4.8 GB bf16
                                              with 128 of its 512 experts

True widths everywhere (hidden size, heads, latent rank, expert widths, vocabulary); only the layer
count (and Qwen3-Next's expert count) is cut so that one file fits the machine. Tensor names are each
family's hub layout: DeepSeek `mlp.experts.{e}.*` + `mlp.shared_experts.*` and
`self_attn.kv_a_proj_with_mqa` / `kv_a_layernorm` / `kv_b_proj`; GPT-OSS the fused expert stacks as
`*_blocks` [E, rows, cols/32, 16] + `*_scales` [E, rows, cols/32] u8 (and a `quantization_config`
{quant_method: mxfp4} in config.json, as the hub's); Qwen3-Next `linear_attn.*` and `mlp.experts.{e}.*`
+ `mlp.shared_expert(_gate)`. make_bench_models checks each list against transformers (parameter
count of the real class on the meta device; names and shapes of save_pretrained on a tiny twin).

Initialisation (besides make_bench_models' normal / ones / router): `zeros` for Qwen3-Next's
zero-centred RMSNorms (weight 1 + w) and A_log (decay rate 1), `mxfp4` blocks as uniform random bytes
(every FP4 code equally likely: rms 2.93 before scaling) and `scales` as e8m0 exponents 119..121
(x 2^-8 .. 2^-6: rms ~0.01-0.05, near the 0.02 of the float tensors).
"""

from __future__ import annotations

import math

from transformers import (
    DeepseekV2Config,
    DeepseekV2ForCausalLM,
    GptOssConfig,
    GptOssForCausalLM,
    Qwen3NextConfig,
    Qwen3NextForCausalLM,
)

MODELS = {
    "deepseek-v2-lite-3l": dict(
        family="deepseek_v2",
        config_cls=DeepseekV2Config,
        model_cls=DeepseekV2ForCausalLM,
        like="DeepSeek-V2-Lite",
        config=dict(
            vocab_size=102400, hidden_size=2048, intermediate_size=10944, moe_intermediate_size=1408,
            num_hidden_layers=3, num_attention_heads=16, num_key_value_heads=16, n_routed_experts=64,
            n_shared_experts=2, num_experts_per_tok=6, first_k_dense_replace=1, kv_lora_rank=512,
            q_lora_rank=None, qk_nope_head_dim=128, qk_rope_head_dim=64, v_head_dim=128, topk_method="greedy",
            n_group=1, topk_group=1, routed_scaling_factor=1.0, norm_topk_prob=False, max_position_embeddings=163840,
            rms_norm_eps=1e-6, rope_parameters={"rope_type": "yarn", "rope_theta": 10000.0, "factor": 40.0,
                                                "original_max_position_embeddings": 4096, "beta_fast": 32.0,
                                                "beta_slow": 1.0, "mscale": 0.707, "mscale_all_dim": 0.707},
            tie_word_embeddings=False, bos_token_id=1, eos_token_id=2,
        ),
        expect=(1.67e9, 0.46e9),
    ),
    "gpt-oss-20b-4l": dict(
        family="gpt_oss",
        config_cls=GptOssConfig,
        model_cls=GptOssForCausalLM,
        like="GPT-OSS-20B",
        config=dict(
            vocab_size=201088, hidden_size=2880, intermediate_size=2880, num_hidden_layers=4,
            num_attention_heads=64, num_key_value_heads=8, head_dim=64, num_local_experts=32, num_experts_per_tok=4,
            sliding_window=128, layer_types=["sliding_attention", "full_attention"] * 2,
            max_position_embeddings=131072, rms_norm_eps=1e-5, swiglu_limit=7.0, attention_bias=True,
            rope_parameters={"rope_type": "yarn", "rope_theta": 150000.0, "factor": 32.0, "beta_fast": 32.0,
                             "beta_slow": 1.0, "truncate": False, "original_max_position_embeddings": 4096},
            tie_word_embeddings=False, bos_token_id=1, eos_token_id=2,
        ),
        expect=(4.45e9, 1.08e9),
    ),
    "qwen3-next-4l": dict(
        family="qwen3_next",
        config_cls=Qwen3NextConfig,
        model_cls=Qwen3NextForCausalLM,
        like="Qwen3-Next-80B-A3B (128 of 512 experts)",
        config=dict(
            vocab_size=151936, hidden_size=2048, intermediate_size=5120, num_hidden_layers=4,
            num_attention_heads=16, num_key_value_heads=2, head_dim=256, linear_conv_kernel_dim=4,
            linear_key_head_dim=128, linear_value_head_dim=128, linear_num_key_heads=16, linear_num_value_heads=32,
            moe_intermediate_size=512, shared_expert_intermediate_size=512, num_experts=128, num_experts_per_tok=10,
            norm_topk_prob=True, decoder_sparse_step=1, mlp_only_layers=[],
            layer_types=["linear_attention"] * 3 + ["full_attention"], max_position_embeddings=262144,
            rms_norm_eps=1e-6, rope_parameters={"rope_type": "default", "rope_theta": 1e7, "partial_rotary_factor": 0.25},
            tie_word_embeddings=False, bos_token_id=1, eos_token_id=2,
        ),
        expect=(2.38e9, 0.58e9),
    ),
}

# Tiny-twin widths per family (same layers, experts, top-k and flags), for the save_pretrained check.
TINY = {
    "deepseek_v2": dict(hidden_size=64, intermediate_size=24, moe_intermediate_size=8, num_attention_heads=2,
                        num_key_value_heads=2, kv_lora_rank=16, qk_nope_head_dim=8, qk_rope_head_dim=4, v_head_dim=8,
                        vocab_size=64),
    "gpt_oss": dict(hidden_size=64, intermediate_size=32, num_attention_heads=4, num_key_value_heads=2, head_dim=16,
                    vocab_size=64),
    "qwen3_next": dict(hidden_size=32, intermediate_size=12, num_attention_heads=4, num_key_value_heads=2, head_dim=8,
                       linear_key_head_dim=8, linear_value_head_dim=8, linear_num_key_heads=2,
                       linear_num_value_heads=4, moe_intermediate_size=8, shared_expert_intermediate_size=10,
                       vocab_size=64),
}

MXFP4_CONFIG = {
    "modules_to_not_convert": ["model.layers.*.self_attn", "model.layers.*.mlp.router", "model.embed_tokens", "lm_head"],
    "quant_method": "mxfp4",
}


EXPERTS_KEY = {"deepseek_v2": "n_routed_experts", "gpt_oss": "num_local_experts", "mixtral": "num_local_experts"}


def n_experts(family: str, cfg) -> int:
    """Routed experts per MoE layer, whatever the family's config calls the number."""
    return getattr(cfg, EXPERTS_KEY.get(family, "num_experts"))


def nbytes(shape, init: str) -> int:
    """Bytes of one tensor in the checkpoint: u8 for MXFP4 blocks and scales, bf16 otherwise."""
    return math.prod(shape) * (1 if init in ("mxfp4", "scales") else 2)


def logical_params(shape, init: str) -> int:
    """Parameters a tensor stands for: two per MXFP4 block byte, none for the scales."""
    return {"mxfp4": 2 * math.prod(shape), "scales": 0}.get(init, math.prod(shape))


def _mlp(m: str, F: int, H: int) -> list:
    return [(f"{m}.gate_proj.weight", (F, H), "normal"), (f"{m}.up_proj.weight", (F, H), "normal"),
            (f"{m}.down_proj.weight", (H, F), "normal")]


def _deepseek_attn(a: str, cfg) -> list:
    H, nh, rank = cfg.hidden_size, cfg.num_attention_heads, cfg.kv_lora_rank
    nope, rope, v = cfg.qk_nope_head_dim, cfg.qk_rope_head_dim, cfg.v_head_dim
    return [(f"{a}.q_proj.weight", (nh * (nope + rope), H), "normal"),
            (f"{a}.kv_a_proj_with_mqa.weight", (rank + rope, H), "normal"),
            (f"{a}.kv_a_layernorm.weight", (rank,), "ones"),
            (f"{a}.kv_b_proj.weight", (nh * (nope + v), rank), "normal"),
            (f"{a}.o_proj.weight", (H, nh * v), "normal")]


def _deepseek_ffn(m: str, l: int, cfg) -> list:
    H = cfg.hidden_size
    if l < cfg.first_k_dense_replace:
        return _mlp(m, cfg.intermediate_size, H)
    out = [(f"{m}.gate.weight", (cfg.n_routed_experts, H), "router")]
    for e in range(cfg.n_routed_experts):
        out += _mlp(f"{m}.experts.{e}", cfg.moe_intermediate_size, H)
    return out + _mlp(f"{m}.shared_experts", cfg.moe_intermediate_size * cfg.n_shared_experts, H)


def _gpt_oss_layer(p: str, cfg) -> list:
    H, nh, nkv, hd = cfg.hidden_size, cfg.num_attention_heads, cfg.num_key_value_heads, cfg.head_dim
    E, F = cfg.num_local_experts, cfg.intermediate_size
    a, m = f"{p}.self_attn", f"{p}.mlp"
    out = []
    for proj, rows, cols in (("q_proj", nh * hd, H), ("k_proj", nkv * hd, H), ("v_proj", nkv * hd, H), ("o_proj", H, nh * hd)):
        out += [(f"{a}.{proj}.weight", (rows, cols), "normal"), (f"{a}.{proj}.bias", (rows,), "normal")]
    out += [(f"{a}.sinks", (nh,), "normal"), (f"{m}.router.weight", (E, H), "router"), (f"{m}.router.bias", (E,), "normal")]
    for stem, rows, cols in (("gate_up_proj", 2 * F, H), ("down_proj", H, F)):
        out += [(f"{m}.experts.{stem}_blocks", (E, rows, cols // 32, 16), "mxfp4"),
                (f"{m}.experts.{stem}_scales", (E, rows, cols // 32), "scales"),
                (f"{m}.experts.{stem}_bias", (E, rows), "normal")]
    return out


def _qwen3_next_layer(p: str, l: int, cfg) -> list:
    H = cfg.hidden_size
    out = []
    if cfg.layer_types[l] == "linear_attention":
        a = f"{p}.linear_attn"
        nk, dk, nv, dv = cfg.linear_num_key_heads, cfg.linear_key_head_dim, cfg.linear_num_value_heads, cfg.linear_value_head_dim
        conv = 2 * nk * dk + nv * dv
        out += [(f"{a}.dt_bias", (nv,), "ones"), (f"{a}.A_log", (nv,), "zeros"),
                (f"{a}.conv1d.weight", (conv, 1, cfg.linear_conv_kernel_dim), "normal"),
                (f"{a}.norm.weight", (dv,), "ones"), (f"{a}.out_proj.weight", (H, nv * dv), "normal"),
                (f"{a}.in_proj_qkvz.weight", (2 * nk * dk + 2 * nv * dv, H), "normal"),
                (f"{a}.in_proj_ba.weight", (2 * nv, H), "normal")]
    else:
        a, nh, nkv, hd = f"{p}.self_attn", cfg.num_attention_heads, cfg.num_key_value_heads, cfg.head_dim
        out += [(f"{a}.q_proj.weight", (2 * nh * hd, H), "normal"), (f"{a}.k_proj.weight", (nkv * hd, H), "normal"),
                (f"{a}.v_proj.weight", (nkv * hd, H), "normal"), (f"{a}.o_proj.weight", (H, nh * hd), "normal"),
                (f"{a}.q_norm.weight", (hd,), "zeros"), (f"{a}.k_norm.weight", (hd,), "zeros")]
    m = f"{p}.mlp"
    out.append((f"{m}.gate.weight", (cfg.num_experts, H), "router"))
    for e in range(cfg.num_experts):
        out += _mlp(f"{m}.experts.{e}", cfg.moe_intermediate_size, H)
    out += _mlp(f"{m}.shared_expert", cfg.shared_expert_intermediate_size, H)
    return out + [(f"{m}.shared_expert_gate.weight", (1, H), "router")]


def hf_tensors(family: str, cfg) -> list[tuple[str, tuple[int, ...], str]]:
    """(name, shape, init) of every tensor of the hub-layout checkpoint of a family of this module."""
    H, V = cfg.hidden_size, cfg.vocab_size
    norm = "zeros" if family == "qwen3_next" else "ones"
    out = [("model.embed_tokens.weight", (V, H), "normal")]
    for l in range(cfg.num_hidden_layers):
        p = f"model.layers.{l}"
        if family == "deepseek_v2":
            out += _deepseek_attn(f"{p}.self_attn", cfg) + _deepseek_ffn(f"{p}.mlp", l, cfg)
        elif family == "gpt_oss":
            out += _gpt_oss_layer(p, cfg)
        else:
            out += _qwen3_next_layer(p, l, cfg)
        out += [(f"{p}.input_layernorm.weight", (H,), norm), (f"{p}.post_attention_layernorm.weight", (H,), norm)]
    out.append(("model.norm.weight", (H,), norm))
    if not cfg.tie_word_embeddings:
        out.append(("lm_head.weight", (V, H), "normal"))
    return out


def as_saved(family: str, tensors) -> dict:
    """{name: shape} as transformers' save_pretrained writes the list (GPT-OSS: float expert stacks
    [E, inputs, outputs] in place of the MXFP4 blocks and scales)."""
    out = {}
    for name, shape, init in tensors:
        if init == "scales":
            continue
        if init == "mxfp4":
            E, rows, groups, _ = shape
            out[name[: -len("_blocks")]] = (E, groups * 32, rows)
        else:
            out[name] = tuple(shape)
    return out
