#!/usr/bin/env python3
"""The MXFP4 test vectors of tests/fixtures/mxfp4/ (read by tests/mxfp4.rs), seeded and reproducible:

* ggml.bin  — 272 ggml `block_mxfp4` blocks (17 bytes each: E8M0 exponent, 16 bytes of nibbles): every
  exponent 0..=255 once, then 16 more random blocks; every nibble value occurs in every position.
* ggml_f32.bin — their values as gguf-py's `gguf.quants.dequantize(..., GGMLQuantizationType.MXFP4)`
  gives them (little-endian f32, 32 per block): the bit-exact oracle of colibri's dequantiser.
* hf_blocks.bin, hf_scales.bin — 64 blocks in the HuggingFace GPT-OSS layout (`*_blocks` [.., 16] u8,
  `*_scales` u8), exponents 100..=163 — and hf_f32.bin, transformers' own dequantisation of them
  (`integrations.mxfp4.convert_moe_packed_tensors`, float32, one row of 64 blocks): the oracle of the
  repacking from HuggingFace's nibble order to ggml's.
* quant_in_f32.bin, quant_out.bin — 32 blocks of f32 values over many magnitudes (one all-zero block) and
  gguf-py's `gguf.quants.quantize(..., MXFP4)` of them: the oracle of colibri's reference quantiser.

    /work/venv/bin/python tools/make_mxfp4_vectors.py
"""

from pathlib import Path

import numpy as np

OUT = Path(__file__).resolve().parent.parent / "tests" / "fixtures" / "mxfp4"


def ggml_vectors(rng: np.random.Generator) -> None:
    import gguf
    from gguf.quants import dequantize

    n = 256 + 16
    e = np.concatenate([np.arange(256, dtype=np.uint8), rng.integers(0, 256, 16, dtype=np.uint8)])
    qs = rng.integers(0, 256, (n, 16), dtype=np.uint8)
    blocks = np.concatenate([e[:, None], qs], axis=1).astype(np.uint8)
    with np.errstate(over="ignore"):
        values = dequantize(blocks.reshape(1, n * 17), gguf.GGMLQuantizationType.MXFP4).astype(np.float32)
    assert values.shape == (1, n * 32), values.shape
    (OUT / "ggml.bin").write_bytes(blocks.tobytes())
    (OUT / "ggml_f32.bin").write_bytes(values.astype("<f4").tobytes())


def quant_vectors(rng: np.random.Generator) -> None:
    import gguf
    from gguf.quants import quantize

    n = 32
    x = rng.standard_normal((n, 32)).astype(np.float32) * (2.0 ** rng.integers(-20, 20, (n, 1))).astype(np.float32)
    x[3] = 0.0
    q = quantize(x.reshape(1, n * 32), gguf.GGMLQuantizationType.MXFP4)
    assert q.shape == (1, n * 17), q.shape
    (OUT / "quant_in_f32.bin").write_bytes(x.astype("<f4").tobytes())
    (OUT / "quant_out.bin").write_bytes(q.tobytes())


def hf_vectors(rng: np.random.Generator) -> None:
    import torch
    from transformers.integrations.mxfp4 import convert_moe_packed_tensors

    g = 64
    blocks = rng.integers(0, 256, (1, 1, g, 16), dtype=np.uint8)
    scales = (np.arange(g, dtype=np.uint8) + 100).reshape(1, 1, g)
    out = convert_moe_packed_tensors(torch.from_numpy(blocks), torch.from_numpy(scales), dtype=torch.float32)
    # [1, g·32, 1] after transformers' transpose(1, 2): one row of g·32 values.
    values = out.reshape(-1).numpy().astype("<f4")
    (OUT / "hf_blocks.bin").write_bytes(blocks.tobytes())
    (OUT / "hf_scales.bin").write_bytes(scales.tobytes())
    (OUT / "hf_f32.bin").write_bytes(values.tobytes())


def main() -> None:
    OUT.mkdir(parents=True, exist_ok=True)
    rng = np.random.default_rng(71)
    ggml_vectors(rng)
    hf_vectors(rng)
    quant_vectors(rng)


if __name__ == "__main__":
    main()
