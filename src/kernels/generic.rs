//! The portable path's matrix kernels, written as plainly as possible from the scalar reference:
//! what every SIMD path in `simd` is measured against.

use super::actq::{self, QuantizedActs};
use super::gemm::{MR, NR};
use super::{quant, reference, Mat};
use std::ops::Range;

/// out[t·rows.len() + i] = w[rows.start + i] · x[t] (see `simd::GemvFn`).
pub fn gemv(w: Mat<'_>, cols: usize, rows: Range<usize>, x: &[f32], n: usize, out: &mut [f32]) {
    let len = rows.len();
    for (i, r) in rows.enumerate() {
        for t in 0..n {
            out[t * len + i] = dot(w, r, cols, &x[t * cols..(t + 1) * cols]);
        }
    }
}

/// out[t·rows.len() + i] = w[rows.start + i] · activation row t, for q8/q4 `w` (W8A8 / W4A8).
pub fn gemv_i8(w: Mat<'_>, _cols: usize, rows: Range<usize>, xa: &QuantizedActs, n: usize, out: &mut [f32]) {
    let len = rows.len();
    for (i, r) in rows.enumerate() {
        for t in 0..n {
            out[t * len + i] = match w {
                Mat::Q8(q) => actq::dot_q8_i8(q, r, xa, t),
                Mat::Q4(q) => actq::dot_q4_i8(q, r, xa, t),
                _ => panic!("gemv_i8 takes quantised matrices"),
            };
        }
    }
}

/// Reference dot of row `r` of `w` with `x`, for every dtype.
pub fn dot(w: Mat<'_>, r: usize, cols: usize, x: &[f32]) -> f32 {
    let s = r * cols;
    match w {
        Mat::F32(w) => reference::dot_f32(&w[s..s + cols], x),
        Mat::F16(w) => reference::dot_f16(&w[s..s + cols], x),
        Mat::BF16(w) => reference::dot_bf16(&w[s..s + cols], x),
        Mat::Q8(q) => quant::dot_q8(q, r, cols, x),
        Mat::Q4(q) => quant::dot_q4(q, r, cols, x),
    }
}

/// out[i] = w[rows.start + i, k0 .. k0 + kc] as f32 for each row (see `simd::WidenFn`).
pub fn widen_rows(w: Mat<'_>, cols: usize, rows: Range<usize>, k0: usize, out: &mut [f32]) {
    let kc = out.len() / rows.len().max(1);
    for (r, o) in rows.zip(out.chunks_exact_mut(kc.max(1))) {
        widen(w, cols, r, k0, o);
    }
}

/// out = w[row, k0 .. k0 + out.len()] as f32 (k0 and the length multiples of 32 for quantised w).
pub fn widen(w: Mat<'_>, cols: usize, row: usize, k0: usize, out: &mut [f32]) {
    let s = row * cols + k0;
    match w {
        Mat::F32(w) => out.copy_from_slice(&w[s..s + out.len()]),
        Mat::F16(w) => out.iter_mut().zip(&w[s..]).for_each(|(o, &b)| *o = reference::f16_to_f32(b)),
        Mat::BF16(w) => out.iter_mut().zip(&w[s..]).for_each(|(o, &b)| *o = reference::bf16_to_f32(b)),
        Mat::Q8(q) => quant::dequantize_q8(q, s, out),
        Mat::Q4(q) => quant::dequantize_q4(q, s, out),
    }
}

/// y[i] += a · x[i] (x a float vector of at least y's length; shorter panics, as on every path).
pub fn axpy(a: f32, x: Mat<'_>, y: &mut [f32]) {
    assert!(x.len() >= y.len(), "axpy: x holds {} elements, y {}", x.len(), y.len());
    match x {
        Mat::F32(x) => y.iter_mut().zip(x).for_each(|(o, &v)| *o += a * v),
        Mat::F16(x) => y.iter_mut().zip(x).for_each(|(o, &v)| *o += a * reference::f16_to_f32(v)),
        Mat::BF16(x) => y.iter_mut().zip(x).for_each(|(o, &v)| *o += a * reference::bf16_to_f32(v)),
        Mat::Q8(_) | Mat::Q4(_) => panic!("axpy takes float vectors"),
    }
}

/// c[i·ldc + j] += Σ_k a[i·kc + k] · b[k·NR + j] for i < MR, j < nr (≤ NR), k ascending.
pub fn tile(a: &[f32], b: &[f32], kc: usize, c: &mut [f32], ldc: usize, nr: usize) {
    assert!(nr <= NR);
    for i in 0..MR {
        let mut acc = [0f32; NR];
        acc[..nr].copy_from_slice(&c[i * ldc..i * ldc + nr]);
        for k in 0..kc {
            let av = a[i * kc + k];
            for (j, cj) in acc[..nr].iter_mut().enumerate() {
                *cj += av * b[k * NR + j];
            }
        }
        c[i * ldc..i * ldc + nr].copy_from_slice(&acc[..nr]);
    }
}
