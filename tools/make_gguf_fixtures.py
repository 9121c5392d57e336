#!/usr/bin/env python3
"""GGUF fixtures for the GGUF reader's tests: llama.cpp's own convert_hf_to_gguf.py run on the HF
fixture checkpoints in tests/fixtures/models/, as f32 and (for some) --outtype q8_0; and (QUANTIZE)
the f32 file quantised by llama-quantize (a mix of types: Q4_0 where the rows allow it; Q4_K_M,
whose fallbacks for rows under 256 mix Q8_0 / Q5_0 / Q5_1, and a copy of it with the DeltaNet
input projections in F32, float_in_proj).

    /work/venv/bin/python tools/make_gguf_fixtures.py [--llama DIR] [--llama-bin DIR] [--only NAME,...]

Writes tests/fixtures/gguf/<model>.<outtype>.gguf. Checkpoints whose config.json lacks keys the hub's
has are converted from a temporary copy with those keys added (HUB_CONFIG); Qwen3-Next with
--no-mtp (ours have no MTP block, which the converter otherwise requires). The converter refuses tokenizers whose
pre-tokenizer hash it does not know (ours are trained for the tests), so the pre-tokenizer
detection is monkeypatched: byte-level BPE fixtures are declared "qwen2" (their Qwen regex), the
GPT-NeoX one "olmo"; mixtral_gqa's q8_0 file is also rewritten with merged `attn_qkv` tensors
(merge_qkv); qwen2_moe_shared's dense layers get llama.cpp's dense tensor names (see
below). The output is deterministic (no timestamps in GGUF).
"""
import argparse
import os
import shutil
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
DEFAULT_LLAMA = "/work/llama/llama_cpp_python-0.3.36/vendor/llama.cpp"

# (fixture, outtypes): small models whose families llama.cpp converts. "q8_0-split" is the q8_0
# file split by llama.cpp's --split-max-tensors into NAME.q8_0-split-0000N-of-00002.gguf;
# "q8_0-gate_up" the q8_0 file with --fuse-gate-up-exps (one ffn_gate_up_exps per layer); the
# QUANTIZE outtypes are llama-quantize's of the f32 file (made first).
FIXTURES = [
    ("mixtral_gqa", ["f32", "q8_0", "q8_0-split", "q4_0"]),
    ("qwen2_moe_shared", ["f32"]),
    ("qwen3_moe_yarn", ["f32", "q8_0"]),
    ("olmoe", ["f32"]),
    ("granitemoe_hub", ["f32"]),
    ("mixtral_mqa_swa_tied", ["f32"]),
    ("glm4_moe_groups", ["f32"]),
    ("deepseek_v2_greedy", ["f32", "q8_0", "bf16"]),
    ("deepseek_v2_groups_yarn", ["f32"]),
    ("deepseek_v3_mtp", ["f32"]),
    ("gpt_oss_mxfp4", ["f32", "bf16"]),
    ("phimoe_hub", ["f32"]),
    ("qwen3_next_hybrid", ["f32", "q8_0", "q8_0-gate_up", "q4_k_m"]),
    ("dots1_plain_bias", ["f32", "bf16"]),
    ("dots1_groups_swa", ["f32"]),
    ("ernie4_5_moe_hub", ["f32", "bf16"]),
    ("hunyuan_moe_tied_bias", ["f32", "bf16"]),
    ("llama4_chunked_nope", ["f32"]),
    ("llama4_moe_llama3_tied", ["f32"]),
]

# What the fixture checkpoints' config.json lack against the hub's, which llama.cpp's converter
# reads: DeepSeek-V3's scoring_func / topk_method (they give GGUF's expert_gating_func) and
# Phi-3.5-MoE's class name (the converter registers "PhiMoEForCausalLM", as the hub spells it).
HUB_CONFIG = {
    "deepseek_v3": {"scoring_func": "sigmoid", "topk_method": "noaux_tc"},
    "phimoe": {"architectures": ["PhiMoEForCausalLM"]},
    # Hunyuan-A13B's config.json gives these per layer (the transformers port reads ints).
    "hunyuan_v1_moe": lambda c: {
        "moe_intermediate_size": [c["intermediate_size"]] * c["num_hidden_layers"],
        "moe_topk": [c["moe_topk"]] * c["num_hidden_layers"],
        "num_shared_expert": [1] * c["num_hidden_layers"],
    },
}

# Families whose llama.cpp converter reads only the hub's one-tensor-per-expert layout: their
# fused fixtures are converted from a copy with the stacks split per expert (the same values).
PER_EXPERT = {"hunyuan_v1_moe"}

PRE = {"GPTNeoXTokenizer": "olmo"}

# outtype -> llama-quantize type (its fallbacks included: Q4_0 falls back for rows of 16).
QUANTIZE = {"q4_0": "Q4_0", "q4_k_m": "Q4_K_M"}


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--llama", default=DEFAULT_LLAMA)
    ap.add_argument("--llama-bin", default="/work/llama/build/bin", help="where llama-quantize is")
    ap.add_argument("--only", default="")
    args = ap.parse_args()
    sys.path.insert(0, str(Path(args.llama) / "gguf-py"))
    sys.path.insert(0, args.llama)
    import json
    import convert_hf_to_gguf as conv
    from conversion import base

    def pre(self, tokenizer):
        cfg = json.loads((Path(self.dir_model) / "tokenizer_config.json").read_text())
        return PRE.get(cfg.get("tokenizer_class"), "qwen2")

    base.TextModel.get_vocab_base_pre = pre
    # qwen2_moe_shared has dense layers (decoder_sparse_step 2), which llama.cpp's QWEN2MOE tensor
    # list lacks: let its converter write them under the usual dense names (ffn_gate/up/down), as
    # it does for the archs that have leading dense layers.
    import gguf
    # GLM's vocab writer looks up GLM's own special tokens ([gMASK], ...): ours are Qwen-style.
    from conversion import glm
    glm.Glm4MoeModel.set_vocab = lambda self: self._set_vocab_gpt2()
    # Phi-3's vocab writer wants a SentencePiece tokenizer.model; ours is a tokenizer.json.
    from conversion import phi
    phi.PhiMoeModel.set_vocab = lambda self: self._set_vocab_gpt2()
    # ERNIE's wants a SentencePiece tokenizer.model, Hunyuan's a tiktoken tokenizer: ours are
    # byte-level BPE tokenizer.json files.
    from conversion import ernie, hunyuan
    ernie.Ernie4_5Model.set_vocab = lambda self: self._set_vocab_gpt2()
    hunyuan.HunYuanMoEModel.set_vocab = lambda self: self._set_vocab_gpt2()
    arch = gguf.MODEL_TENSORS[gguf.MODEL_ARCH.QWEN2MOE]
    for t in (gguf.MODEL_TENSOR.FFN_GATE, gguf.MODEL_TENSOR.FFN_UP, gguf.MODEL_TENSOR.FFN_DOWN):
        if t not in arch:
            arch.append(t)
    tmp = Path(tempfile.mkdtemp())
    only = set(filter(None, args.only.split(",")))
    out_dir = ROOT / "tests" / "fixtures" / "gguf"
    out_dir.mkdir(parents=True, exist_ok=True)
    for name, outtypes in FIXTURES:
        if only and name not in only:
            continue
        for outtype in outtypes:
            out = out_dir / f"{name}.{outtype}.gguf"
            if outtype in QUANTIZE:
                quantize(args.llama_bin, out_dir / f"{name}.f32.gguf", out, QUANTIZE[outtype])
                if name == "qwen3_next_hybrid" and outtype == "q4_k_m":
                    float_in_proj(out, out_dir / f"{name}.q4_k_m-f32_in.gguf")
                for f in sorted(out_dir.glob(f"{name}.{outtype}*.gguf")):
                    print(f"{f.relative_to(ROOT)}: {os.path.getsize(f)} bytes")
                continue
            split = outtype.endswith("-split")
            src = checkpoint(name, tmp)
            base_type = outtype.removesuffix("-split").removesuffix("-gate_up")
            sys.argv = ["convert_hf_to_gguf.py", str(src), "--outtype", base_type, "--outfile", str(out)]
            if outtype.endswith("-gate_up"):
                sys.argv.append("--fuse-gate-up-exps")
            if name.startswith("qwen3_next"):
                sys.argv.append("--no-mtp")
            if split:
                sys.argv += ["--split-max-tensors", "12"]
            conv.main()
            if name == "mixtral_gqa" and outtype == "q8_0":
                merge_qkv(out, out_dir / f"{name}.q8_0-qkv.gguf")
            if name == "qwen3_next_hybrid" and outtype == "q8_0":
                legacy_ssm_in(out, out_dir / f"{name}.q8_0-ssm_in.gguf")
            for f in sorted(out_dir.glob(f"{name}.{outtype}*.gguf")):
                print(f"{f.relative_to(ROOT)}: {os.path.getsize(f)} bytes")


def quantize(bin_dir, src, dst, qtype):
    """llama-quantize SRC DST QTYPE, one thread (deterministic)."""
    import subprocess
    env = dict(os.environ, LD_LIBRARY_PATH=bin_dir)
    subprocess.run([f"{bin_dir}/llama-quantize", str(src), str(dst), qtype, "1"], check=True, env=env,
                   stdout=subprocess.DEVNULL)


def checkpoint(name, tmp):
    """The fixture checkpoint's directory, or a copy whose config.json has HUB_CONFIG's keys
    (and whose expert stacks are split per expert, for PER_EXPERT families)."""
    import json
    src = ROOT / "tests/fixtures/models" / name
    cfg = json.loads((src / "config.json").read_text())
    extra = HUB_CONFIG.get(cfg["model_type"])
    if not extra:
        return src
    dst = tmp / name
    shutil.copytree(src, dst, dirs_exist_ok=True)
    cfg.update(extra(cfg) if callable(extra) else extra)
    (dst / "config.json").write_text(json.dumps(cfg, indent=2))
    if cfg["model_type"] in PER_EXPERT:
        per_expert(dst / "model.safetensors")
    return dst


def per_expert(path):
    """Rewrite `path` with its fused expert stacks (mlp.experts.gate_up_proj [E, 2F, H] = cat(gate,
    up), down_proj [E, H, F]) as one tensor per expert and projection, as hub checkpoints hold them."""
    import numpy as np
    from safetensors.numpy import load_file, save_file
    out = {}
    for k, v in load_file(str(path)).items():
        if k.endswith("mlp.experts.gate_up_proj"):
            base, f = k[: -len("gate_up_proj")], v.shape[1] // 2
            for e in range(v.shape[0]):
                out[f"{base}{e}.gate_proj.weight"] = np.ascontiguousarray(v[e, :f])
                out[f"{base}{e}.up_proj.weight"] = np.ascontiguousarray(v[e, f:])
        elif k.endswith("mlp.experts.down_proj"):
            for e in range(v.shape[0]):
                out[f"{k[: -len('down_proj')]}{e}.down_proj.weight"] = np.ascontiguousarray(v[e])
        else:
            out[k] = v
    save_file(out, str(path), metadata={"format": "pt"})


def merge_qkv(src, dst):
    """A copy of `src` whose q/k/v weights are one `attn_qkv` per layer (rows q, then k, then v,
    as stored: the q/k rows stay llama.cpp-permuted), the layout of the architectures whose
    checkpoints fuse them."""
    import numpy as np

    def tensors(r, by_name):
        for t in r.tensors:
            if ".attn_k." in t.name or ".attn_v." in t.name:
                continue
            if ".attn_q." in t.name:
                parts = [by_name[t.name.replace("attn_q", x)] for x in ("attn_q", "attn_k", "attn_v")]
                assert len({p.tensor_type for p in parts}) == 1
                data = np.concatenate([p.data for p in parts], axis=0)
                yield t.name.replace("attn_q", "attn_qkv"), data, t.tensor_type
            else:
                yield t.name, t.data, t.tensor_type
    rewrite(src, dst, tensors)


def legacy_ssm_in(src, dst):
    """A copy of Qwen3-Next GGUF `src` in the layout of llama.cpp's earlier converter: each
    DeltaNet layer's `attn_qkv` + `attn_gate` as one `ssm_in`, rows grouped per key head g as
    the checkpoint's in_proj_qkvz ([q_g, k_g, v_g, z_g]); row bytes moved as they are."""
    import numpy as np

    def tensors(r, by_name):
        get = lambda k: int(r.fields[f"qwen3next.{k}"].contents())
        nk, dk, nv = get("ssm.group_count"), get("ssm.state_size"), get("ssm.time_step_rank")
        rv = get("ssm.inner_size") // nk  # v (and z) rows per key head
        for t in r.tensors:
            if ".attn_gate." in t.name:
                continue
            if ".attn_qkv." in t.name:
                qkv, z = t.data, by_name[t.name.replace("attn_qkv", "attn_gate")].data
                assert qkv.shape[0] == 2 * nk * dk + nk * rv and nv % nk == 0
                q, k, v = qkv[:nk * dk], qkv[nk * dk:2 * nk * dk], qkv[2 * nk * dk:]
                groups = [np.concatenate([q[g * dk:(g + 1) * dk], k[g * dk:(g + 1) * dk],
                                          v[g * rv:(g + 1) * rv], z[g * rv:(g + 1) * rv]]) for g in range(nk)]
                yield t.name.replace("attn_qkv", "ssm_in"), np.concatenate(groups), t.tensor_type
            else:
                yield t.name, t.data, t.tensor_type
    rewrite(src, dst, tensors)


def float_in_proj(src, dst):
    """A copy of Qwen3-Next GGUF `src` whose `attn_qkv` and `attn_gate` (of different types in a
    Q4_K_M file: the DeltaNet input projection colibri keeps as two matrices) are F32, ggml's
    dequantisation of them: the same weights, in one type (one matrix in colibri)."""
    import gguf
    import numpy as np

    def tensors(r, by_name):
        for t in r.tensors:
            if ".attn_qkv." in t.name or ".attn_gate." in t.name:
                yield t.name, np.ascontiguousarray(gguf.quants.dequantize(t.data, t.tensor_type), dtype=np.float32), \
                    gguf.GGMLQuantizationType.F32
            else:
                yield t.name, t.data, t.tensor_type
    rewrite(src, dst, tensors)


def rewrite(src, dst, tensors):
    """Write `dst` with `src`'s metadata (copied as gguf-py's gguf_new_metadata.py does) and the
    tensors `tensors(reader, by_name)` yields as (name, data, type)."""
    import gguf
    r = gguf.GGUFReader(src)
    w = gguf.GGUFWriter(dst, r.fields["general.architecture"].contents())
    for f in r.fields.values():
        if f.name == "general.architecture" or f.name.startswith("GGUF."):
            continue
        sub = f.types[-1] if f.types[0] == gguf.GGUFValueType.ARRAY else None
        w.add_key_value(f.name, f.contents(), f.types[0], sub_type=sub)
    out = list(tensors(r, {t.name: t for t in r.tensors}))
    for name, data, ty in out:
        w.add_tensor_info(name, data.shape, data.dtype, data.nbytes, ty)
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_ti_data_to_file()
    for _, data, _ in out:
        w.write_tensor_data(data)
    w.close()


if __name__ == "__main__":
    main()
