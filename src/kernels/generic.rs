//! The portable path: its table, and its matrix kernels written as plainly as possible from the
//! scalar reference (`reference::ROWS` for each dtype's products, the format's dequantisers for
//! widening). What every SIMD path is measured against, and what an arch table starts from.

use super::actq::{quantize_blocks, QuantizedActs};
use super::mat::Mat;
use super::reference;
use super::table::{CpuPath, MatKernels, Operand, Table, MR, NR};
use crate::format::DType;
use std::ops::Range;

/// The portable kernels of every dtype: an arch table copies this and replaces the rows it
/// implements.
pub(crate) const MATS: [MatKernels; DType::COUNT] = {
    let mut m = [MatKernels { gemv, gemv_i8: None, widen: widen_rows, int8_at_any_n: false }; DType::COUNT];
    let mut i = 0;
    while i < DType::COUNT {
        if reference::ROWS[i].dot_i8.is_some() {
            m[i].gemv_i8 = Some(gemv_i8);
        }
        i += 1;
    }
    m
};

pub(crate) static GENERIC: Table = Table {
    path: CpuPath::Generic,
    mats: MATS,
    dot_f32: reference::dot_f32,
    dot_f16: reference::dot_f16,
    dot_bf16: reference::dot_bf16,
    axpy_f32,
    axpy_f16,
    axpy_bf16,
    tile,
    tile_pair: None,
    transpose,
    scale_max: super::vexp::scale_max,
    exp_sum: super::vexp::exp_sum,
    gated: super::vexp::gated,
    quantize: quantize_blocks,
    bf16: None,
    delta_step: super::delta::reference_step,
    attend: None,
};

/// dst[j·rows + i] = src[i·lds + j] (see `table::TransposeFn`).
pub fn transpose(src: &[f32], lds: usize, rows: usize, cols: usize, dst: &mut [f32]) {
    for i in 0..rows {
        for j in 0..cols {
            dst[j * rows + i] = src[i * lds + j];
        }
    }
}

/// out[t·rows.len() + i] = w[rows.start + i] · x[t] (see `table::GemvFn`).
pub fn gemv(w: Mat<'_>, rows: Range<usize>, x: &[f32], n: usize, out: &mut [f32]) {
    let (len, cols, dot) = (rows.len(), w.cols(), reference::row(w.dtype()).dot);
    for (i, r) in rows.enumerate() {
        for t in 0..n {
            out[t * len + i] = dot(w, r, &x[t * cols..(t + 1) * cols]);
        }
    }
}

/// out[t·rows.len() + i] = w[rows.start + i] · activation row t, for block-quantised `w`
/// (W8A8 / W4A8).
pub fn gemv_i8(w: Mat<'_>, rows: Range<usize>, xa: &QuantizedActs, n: usize, out: &mut [f32]) {
    let dot = reference::row(w.dtype()).dot_i8.expect("gemv_i8 takes block-quantised matrices");
    let len = rows.len();
    for (i, r) in rows.enumerate() {
        for t in 0..n {
            out[t * len + i] = dot(w, r, xa, t);
        }
    }
}

/// out[i] = w[rows.start + i, k0 .. k0 + kc] as f32 for each row (see `table::WidenFn`).
pub fn widen_rows(w: Mat<'_>, rows: Range<usize>, k0: usize, out: &mut [f32]) {
    let kc = out.len() / rows.len().max(1);
    for (r, o) in rows.zip(out.chunks_exact_mut(kc.max(1))) {
        widen(w, r, k0, o);
    }
}

/// out = w[row, k0 .. k0 + out.len()] as f32 (k0 and the length on block boundaries).
pub fn widen(w: Mat<'_>, row: usize, k0: usize, out: &mut [f32]) {
    w.dequantize(row * w.cols() + k0, out)
}

/// y[i] += a · x[i] for x of at least y's length (shorter panics, as on every path).
fn axpy_by(a: f32, x_len: usize, x: impl Fn(usize) -> f32, y: &mut [f32]) {
    assert!(x_len >= y.len(), "axpy: x holds {x_len} elements, y {}", y.len());
    y.iter_mut().enumerate().for_each(|(i, o)| *o += a * x(i));
}

pub fn axpy_f32(a: f32, x: &[f32], y: &mut [f32]) {
    axpy_by(a, x.len(), |i| x[i], y)
}

pub fn axpy_f16(a: f32, x: &[u16], y: &mut [f32]) {
    axpy_by(a, x.len(), |i| reference::f16_to_f32(x[i]), y)
}

pub fn axpy_bf16(a: f32, x: &[u16], y: &mut [f32]) {
    axpy_by(a, x.len(), |i| reference::bf16_to_f32(x[i]), y)
}

/// c[i·ldc + j] += Σ_k a[i·a.ld + k] · b[k·b.ld + j] for i < MR, j < nr (≤ NR), k ascending.
pub fn tile(a: Operand<'_>, b: Operand<'_>, kc: usize, c: &mut [f32], ldc: usize, nr: usize) {
    assert!(nr <= NR);
    for i in 0..MR {
        let mut acc = [0f32; NR];
        acc[..nr].copy_from_slice(&c[i * ldc..i * ldc + nr]);
        for k in 0..kc {
            let av = a.v[i * a.ld + k];
            for (j, cj) in acc[..nr].iter_mut().enumerate() {
                *cj += av * b.v[k * b.ld + j];
            }
        }
        c[i * ldc..i * ldc + nr].copy_from_slice(&acc[..nr]);
    }
}
