#!/usr/bin/env python3
"""Test vectors for GGUF's block types (tests/gguf_blocks.rs), made by llama.cpp itself.

For one seeded input matrix x [ROWS, COLS] (rows of different shapes: Gaussian, small weights
with outliers, all-positive, heavy-tailed, zero / tiny / negative blocks, a coarse grid with
rounding ties), each block type is quantised by llama.cpp's own quantiser — `ggml_quantize_chunk`
of libggml-base, the function llama-quantize calls (no importance matrix) — and the blocks are
dequantised by gguf-py's reference `gguf.quants.dequantize`. Written to
tests/fixtures/gguf_blocks/:

  x.f32            the input, f32 little-endian [ROWS, COLS]
  <type>.bin       b"GGBV", u32 ggml type, u32 rows, u32 cols, the blocks as ggml stores them,
                   then gguf-py's dequantisation, f32 [ROWS, COLS]

Usage: tools/make_gguf_vectors.py [LIBGGML_BASE]  (default /work/llama/build/bin/libggml-base.so,
built by tools/build_llama_cpp.sh); needs numpy and gguf (gguf-py) — run it with the venv's
python. Reproducible: same seed, same llama.cpp, same bytes.
"""
import ctypes
import os
import struct
import sys

import numpy as np
import gguf
from gguf.quants import dequantize

ROWS, COLS = 6, 512
TYPES = ["Q4_0", "Q4_1", "Q5_0", "Q5_1", "Q8_0", "Q2_K", "Q3_K", "Q4_K", "Q5_K", "Q6_K", "IQ4_NL", "IQ4_XS"]
OUT = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "tests", "fixtures", "gguf_blocks")


def inputs() -> np.ndarray:
    rng = np.random.default_rng(20261204)
    x = np.zeros((ROWS, COLS), dtype=np.float32)
    x[0] = rng.standard_normal(COLS)
    x[1] = 0.02 * rng.standard_normal(COLS)
    x[1, rng.choice(COLS, 6, replace=False)] *= 10.0
    x[2] = rng.uniform(0.1, 1.0, COLS)
    x[3] = 0.05 * rng.standard_t(3, COLS)
    x[4, :64] = 0.0
    x[4, 64:96] = 1e-8 * rng.standard_normal(32)
    x[4, 96:288] = rng.uniform(-1.0, -0.2, 192)
    x[4, 288:] = 0.3 * rng.standard_normal(COLS - 288)
    x[5] = 0.25 * rng.integers(-12, 13, COLS) + 300.0 * (rng.standard_normal(COLS) > 2.5)
    return x


def main() -> None:
    lib = ctypes.CDLL(sys.argv[1] if len(sys.argv) > 1 else "/work/llama/build/bin/libggml-base.so")
    lib.ggml_quantize_chunk.restype = ctypes.c_size_t
    lib.ggml_quantize_chunk.argtypes = [ctypes.c_int, ctypes.c_void_p, ctypes.c_void_p, ctypes.c_int64,
                                        ctypes.c_int64, ctypes.c_int64, ctypes.c_void_p]
    x = inputs()
    os.makedirs(OUT, exist_ok=True)
    x.tofile(os.path.join(OUT, "x.f32"))
    for name in TYPES:
        qt = gguf.GGMLQuantizationType[name]
        block, size = gguf.GGML_QUANT_SIZES[qt]
        q = np.zeros(ROWS * COLS // block * size, dtype=np.uint8)
        lib.ggml_quantize_init(int(qt))
        n = lib.ggml_quantize_chunk(int(qt), x.ctypes.data, q.ctypes.data, 0, ROWS, COLS, None)
        assert n == q.size, (name, n, q.size)
        y = dequantize(q.reshape(ROWS, -1), qt).astype(np.float32)
        assert y.shape == (ROWS, COLS)
        with open(os.path.join(OUT, f"{name.lower()}.bin"), "wb") as f:
            f.write(b"GGBV" + struct.pack("<III", int(qt), ROWS, COLS))
            f.write(q.tobytes())
            f.write(y.tobytes())
        err = float(np.abs(y - x).max(axis=1).max())
        print(f"{name:7} type {int(qt):2}  {q.size:5} bytes  max|x - deq| {err:.3g}")


if __name__ == "__main__":
    main()
