#!/usr/bin/env python3
"""The DeepSeek-V3 FP8 fixture: tests/fixtures/models/deepseek_v3_mtp with its linear weights stored as
DeepSeek-V3/R1 ship them (float8_e4m3fn + one f32 `weight_scale_inv` per tile, quantization_config fp8 e4m3),
in 16 x 16 tiles so that the tiny matrices have several, some partial. The oracle is transformers on the
dequantised weights (w = e4m3 · scale in f32, DeepSeek's weight_dequant), which a converter must reproduce
exactly. Also writes oracle/e4m3_values.json: torch's value of every float8_e4m3fn byte (the tests' reference
decoder). Run after tools/make_fixtures.py --only deepseek_v3_mtp:

    /work/venv/bin/python tools/make_fp8_fixture.py
"""

import json
import shutil
import sys
import tempfile
from pathlib import Path

import numpy as np
import torch
from safetensors.torch import load_file, save_file

sys.path.insert(0, str(Path(__file__).resolve().parent))
import make_fixtures as mf  # noqa: E402

BASE = mf.MODEL_DIR / "deepseek_v3_mtp"
OUT = mf.MODEL_DIR / "deepseek_v3_fp8"
BLOCK = (16, 16)
# What DeepSeek's FP8 checkpoints keep in bf16: embeddings, norms, routers and their bias, lm_head.
KEEP = ("embed_tokens", "norm", "mlp.gate.", "lm_head", "e_score_correction_bias")


def quantise(w: torch.Tensor):
    """Per-tile float8_e4m3fn codes and scales (amax / 448), and the dequantised f32 weight."""
    R, C = w.shape
    br, bc = BLOCK
    sr, sc = -(-R // br), -(-C // bc)
    scale = torch.empty(sr, sc, dtype=torch.float32)
    q = torch.empty(R, C, dtype=torch.float8_e4m3fn)
    for i in range(sr):
        for j in range(sc):
            tile = w[i * br:(i + 1) * br, j * bc:(j + 1) * bc].float()
            s = float(tile.abs().max()) / 448.0 or 1.0
            scale[i, j] = s
            q[i * br:(i + 1) * br, j * bc:(j + 1) * bc] = (tile / torch.tensor(s, dtype=torch.float32)).to(torch.float8_e4m3fn)
    full = scale.repeat_interleave(br, 0)[:R].repeat_interleave(bc, 1)[:, :C]
    return q, scale, q.float() * full


def main():
    src = load_file(str(BASE / "model.safetensors"))
    n_layers = json.loads((BASE / "config.json").read_text())["num_hidden_layers"]
    stored, dequantised = {}, {}
    for name, w in sorted(src.items()):
        in_model = not name.startswith(f"model.layers.{n_layers}.")
        if w.ndim == 2 and name.endswith(".weight") and not any(k in name for k in KEEP):
            q, s, d = quantise(w)
            stored[name], stored[name + "_scale_inv"] = q, s
            if in_model:
                dequantised[name] = d
        else:
            stored[name] = w
            if in_model:
                dequantised[name] = w
    if OUT.exists():
        shutil.rmtree(OUT)
    shutil.copytree(BASE, OUT)
    shutil.rmtree(OUT / "oracle")
    save_file(stored, str(OUT / "model.safetensors"), metadata={"format": "pt"})
    cfg = json.loads((OUT / "config.json").read_text())
    cfg["quantization_config"] = {"activation_scheme": "dynamic", "fmt": "e4m3", "quant_method": "fp8", "weight_block_size": list(BLOCK)}
    mf.write_json(OUT / "config.json", cfg, indent=2)

    # The oracle: transformers on the dequantised weights (a float checkpoint with the base config).
    meta = json.loads((BASE / "oracle" / "meta.json").read_text())
    with tempfile.TemporaryDirectory() as tmp:
        for f in BASE.iterdir():
            if f.is_file() and f.name != "model.safetensors":
                shutil.copy(f, tmp)
        save_file(dequantised, str(Path(tmp) / "model.safetensors"), metadata={"format": "pt"})
        loaded = mf.load_fixture(Path(tmp), "deepseek_v3")
    variants = {"f32": loaded, "bf16": mf.rounded_copy(loaded, torch.bfloat16), "f16": mf.rounded_copy(loaded, torch.float16)}
    res = {n: mf.run_variant(m, meta["input_ids"], meta["greedy_prompt"]) for n, m in variants.items()}
    r_min = mf.router_min_rel({"family": "deepseek_v3"})
    for n, r in res.items():
        assert r["r_rel"] >= r_min and r["g_rel"] >= mf.GREEDY_MIN_REL, (n, r["r_rel"], r["g_rel"])
    od = OUT / "oracle"
    od.mkdir()
    for n, r in res.items():
        np.save(od / f"logits_{n}.npy", r["logits"].numpy().astype(np.float32))
        meta[f"greedy_{n}"], meta[f"routing_{n}"], meta[f"routing_weights_{n}"] = r["greedy"], r["routing"], r["weights"]
    meta.update(
        name=OUT.name,
        min_router_margin=min(r["r_rel"] for r in res.values()),
        min_greedy_margin=min(r["g_rel"] for r in res.values()),
        margins_per_variant={n: {"router_rel": r["r_rel"], "router_abs": r["r_abs"], "greedy_rel": r["g_rel"], "greedy_abs": r["g_abs"]} for n, r in res.items()},
        safetensors=mf.st_listing(OUT),
        config_json=cfg,
        source_dtype="float8_e4m3fn (+ f32 scales) / float32",
        notes="deepseek_v3_mtp with every linear weight but the routers and lm_head stored as DeepSeek-V3/R1's FP8: "
        "float8_e4m3fn codes + weight_scale_inv (f32, one per 16 x 16 tile, amax/448), quantization_config fp8 e4m3. "
        "Oracle: transformers on the dequantised weights (codes x scale in f32).",
    )
    meta.pop("independent_numpy_check_rel_err", None)
    mf.write_json(od / "meta.json", meta, indent=1)
    table = torch.arange(256, dtype=torch.uint8).view(torch.float8_e4m3fn).float().tolist()
    mf.write_json(od / "e4m3_values.json", [None if v != v else v for v in table], indent=0)
    print(f"{OUT.name}: router margin {meta['min_router_margin']:.3f}, greedy margin {meta['min_greedy_margin']:.3f}")


if __name__ == "__main__":
    main()
