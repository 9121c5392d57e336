#!/usr/bin/env python3
"""Check c_examples/embed.c's output against transformers' hidden states (standard library only).

    scripts/check_embedding.py HIDDEN.npy POOLING OUT

HIDDEN.npy: a fixture's oracle/hidden_f32.npy (float32 [T, hidden], tools/make_embedding_fixtures.py).
OUT: embed's stdout for the inputs "ids:<the oracle's input_ids>" and one text. The first vector must
be the oracle's states pooled by POOLING (mean | last | cls) and L2-normalised, within 1e-4 of its
largest |value|; every vector must have unit norm. Exit status 1 with the reason otherwise."""

import array
import ast
import math
import struct
import sys


def read_npy(path):
    raw = open(path, "rb").read()
    assert raw[:6] == b"\x93NUMPY", "not a .npy file"
    (hlen,) = struct.unpack("<H", raw[8:10])
    header = ast.literal_eval(raw[10:10 + hlen].decode("latin-1"))
    assert header["descr"] == "<f4" and not header["fortran_order"], header
    data = array.array("f", raw[10 + hlen:])
    return header["shape"], data


def main():
    path, pooling, out = sys.argv[1:4]
    (t, d), h = read_npy(path)
    rows = [h[i * d:(i + 1) * d] for i in range(t)]
    if pooling == "mean":
        v = [sum(r[j] for r in rows) / t for j in range(d)]
    else:
        v = list(rows[-1] if pooling == "last" else rows[0])
    norm = math.sqrt(sum(x * x for x in v))
    want = [x / norm for x in v]
    lines = open(out).read().splitlines()
    vectors = [[float(x) for x in ln.split(":", 1)[1].split()] for ln in lines if " vector:" in ln]
    norms = [float(ln.rsplit("norm:", 1)[1]) for ln in lines if " norm:" in ln]
    if not vectors or len(vectors[0]) != d:
        sys.exit(f"expected a first vector of {d} floats")
    scale = max(abs(x) for x in want)
    diff = max(abs(a - b) for a, b in zip(vectors[0], want))
    if diff > 1e-4 * scale:
        sys.exit(f"{pooling}: max|diff| {diff:.3e} is above 1e-4 of {scale:.3e}")
    if any(abs(n - 1.0) > 1e-5 for n in norms):
        sys.exit(f"norms {norms} are not 1")
    print(f"{pooling}: max|diff| = {diff / scale:.2e} of max|v|")


if __name__ == "__main__":
    main()
