//! Scalar reference kernels: the specification every SIMD path is tested against — float dots,
//! RMSNorm, softmax, SiLU, and one row per dtype with its reference products (`ROWS`).

use super::actq::{self, QuantizedActs};
use super::kr8ref;
use super::mat::Mat;
use crate::format::blocks::{q8_0_block, QK};
use crate::format::ggml::{self, Block, QK_K};
use crate::format::mxfp4;
use crate::format::tiles;
use crate::format::DType;

/// bfloat16 bits → f32 (exact).
#[inline]
pub fn bf16_to_f32(b: u16) -> f32 {
    f32::from_bits(u32::from(b) << 16)
}

pub use crate::format::blocks::f16_to_f32;

/// Σ w[i]·x[i] with 8 partial sums in a fixed order (the order every path reproduces).
/// Multiply then add (no fused multiply-add: without the `fma` target feature `mul_add` is a
/// libm call, and the baseline build must not assume FMA).
pub fn dot_f32(w: &[f32], x: &[f32]) -> f32 {
    dot_by(w.len(), x, |i| w[i])
}

/// Σ bf16(w[i])·x[i].
pub fn dot_bf16(w: &[u16], x: &[f32]) -> f32 {
    dot_by(w.len(), x, |i| bf16_to_f32(w[i]))
}

/// Σ f16(w[i])·x[i].
pub fn dot_f16(w: &[u16], x: &[f32]) -> f32 {
    dot_by(w.len(), x, |i| f16_to_f32(w[i]))
}

#[inline]
fn dot_by(n: usize, x: &[f32], w: impl Fn(usize) -> f32) -> f32 {
    let mut acc = [0f32; 8];
    let full = n - n % 8;
    let mut i = 0;
    while i < full {
        for (l, a) in acc.iter_mut().enumerate() {
            *a += w(i + l) * x[i + l];
        }
        i += 8;
    }
    // Lanes folded as an 8-wide register is: halves added, then pairs, then the last two.
    let mut s = ((acc[0] + acc[4]) + (acc[2] + acc[6])) + ((acc[1] + acc[5]) + (acc[3] + acc[7]));
    for (j, &xj) in x.iter().enumerate().take(n).skip(full) {
        s += w(j) * xj;
    }
    s
}

/// One RMSNorm row: y = x · rsqrt(mean(x²) + eps) · w, the variance accumulated in f64.
pub fn rmsnorm_row(x: &[f32], w: &[f32], eps: f32, y: &mut [f32]) {
    let inv = rms_inverse(x, eps);
    for ((yi, &xi), &wi) in y.iter_mut().zip(x).zip(w) {
        *yi = wi * (xi * inv);
    }
}

/// rsqrt(mean(x²) + eps) of one row, the squares summed in f64 over eight lanes (element j in
/// lane j mod 8; lanes folded in order, then the tail): independent chains the compiler keeps in
/// vector registers, where one running sum waited on each add's latency.
pub fn rms_inverse(x: &[f32], eps: f32) -> f32 {
    let mut lanes = [0f64; 8];
    let chunks = x.chunks_exact(8);
    let tail = chunks.remainder();
    for c in chunks {
        for (l, &v) in lanes.iter_mut().zip(c) {
            *l += f64::from(v) * f64::from(v);
        }
    }
    let ss = tail.iter().fold(lanes.iter().sum::<f64>(), |s, &v| s + f64::from(v) * f64::from(v));
    (1.0 / (ss / x.len() as f64 + f64::from(eps)).sqrt()) as f32
}

/// One LayerNorm row (`nn.LayerNorm`): y = (x − mean(x)) · rsqrt(var(x) + eps) · w + b, the
/// biased variance; mean and variance accumulated in f64.
pub fn layernorm_row(x: &[f32], w: &[f32], b: &[f32], eps: f32, y: &mut [f32]) {
    let n = x.len() as f64;
    let mean = x.iter().map(|&v| f64::from(v)).sum::<f64>() / n;
    let var = x.iter().map(|&v| (f64::from(v) - mean).powi(2)).sum::<f64>() / n;
    let inv = 1.0 / (var + f64::from(eps)).sqrt();
    for (((yi, &xi), &wi), &bi) in y.iter_mut().zip(x).zip(w).zip(b) {
        *yi = (((f64::from(xi) - mean) * inv) as f32) * wi + bi;
    }
}

/// In-place numerically stable softmax (max subtracted; −inf entries get 0).
pub fn softmax(x: &mut [f32]) {
    softmax_with_sink(x, f32::NEG_INFINITY)
}

/// In-place softmax of x with one more logit, `sink`, in the denominator only (an attention
/// sink: it takes probability mass and attends to nothing); the max is taken over x and the
/// sink, as `eager_attention_forward` of modeling_gpt_oss does. A sink of −∞ is plain softmax.
pub fn softmax_with_sink(x: &mut [f32], sink: f32) {
    let m = x.iter().copied().fold(sink, f32::max);
    if !m.is_finite() {
        let n = x.len() as f32;
        x.iter_mut().for_each(|v| *v = 1.0 / n);
        return;
    }
    let mut sum = f64::from((sink - m).exp());
    for v in x.iter_mut() {
        *v = (*v - m).exp();
        sum += f64::from(*v);
    }
    let inv = (1.0 / sum) as f32;
    x.iter_mut().for_each(|v| *v *= inv);
}

/// x · sigmoid(x).
#[inline]
pub fn silu(x: f32) -> f32 {
    x / (1.0 + (-x).exp())
}

/// Reference W8A16 dot of row `r` of a q8 / q8r8 matrix with f32 activations: Σ_b d_b · Σ_i q·x,
/// each block summed in f32 in element order, blocks accumulated in order.
pub fn dot_q8(w: Mat<'_>, r: usize, x: &[f32]) -> f32 {
    let (m, cols) = (w.q8(), w.cols());
    let b0 = r * cols / QK;
    let mut acc = 0f32;
    for (b, xb) in x[..cols].chunks_exact(QK).enumerate() {
        let qb = m.block(b0 + b);
        let s: f32 = qb.iter().zip(xb).map(|(&q, &v)| f32::from(q) * v).sum();
        acc += m.scale(b0 + b) * s;
    }
    acc
}

/// Reference W4A16 dot of row `r` of a q4 / q4r8 matrix with f32 activations.
pub fn dot_q4(w: Mat<'_>, r: usize, x: &[f32]) -> f32 {
    let (m, cols) = (w.q4(), w.cols());
    let b0 = r * cols / QK;
    let mut acc = 0f32;
    for (b, xb) in x[..cols].chunks_exact(QK).enumerate() {
        let qb = m.block(b0 + b);
        let mut s = 0f32;
        for j in 0..QK / 2 {
            s += (f32::from(qb[j] & 15) - 8.0) * xb[j] + (f32::from(qb[j] >> 4) - 8.0) * xb[j + QK / 2];
        }
        acc += m.scale(b0 + b) * s;
    }
    acc
}

/// Reference dot of row `r` of a q8_0 matrix with f32 activations, summed like `dot_q8`.
pub fn dot_q8_0(w: Mat<'_>, r: usize, x: &[f32]) -> f32 {
    let (cols, bytes) = (w.cols(), w.bytes());
    let mut acc = 0f32;
    for (b, xb) in x[..cols].chunks_exact(QK).enumerate() {
        let (d, qs) = q8_0_block(bytes, r * cols / QK + b);
        let s: f32 = qs.iter().zip(xb).map(|(&q, &v)| f32::from(q as i8) * v).sum();
        acc += d * s;
    }
    acc
}

/// Reference dot of row `r` of an mxfp4 (or mxfp4r8) matrix with f32 activations: Σ_b d_b · Σ_j (v_j·x_j +
/// v_{j+16}·x_{j+16}) over the block's 16 bytes in order, v the doubled e2m1 values.
pub fn dot_mxfp4(w: Mat<'_>, r: usize, x: &[f32]) -> f32 {
    let (cols, bytes, layout) = (w.cols(), w.bytes(), w.layout());
    let mut acc = 0f32;
    for (b, xb) in x[..cols].chunks_exact(QK).enumerate() {
        let (e, qs) = mxfp4::block_in(bytes, layout, r * cols / QK + b);
        let d = mxfp4::e8m0_to_f32_half(e);
        let mut s = 0f32;
        for (j, &q) in qs.iter().enumerate() {
            let (lo, hi) = (mxfp4::KVALUES[usize::from(q & 15)], mxfp4::KVALUES[usize::from(q >> 4)]);
            s += f32::from(lo) * xb[j] + f32::from(hi) * xb[j + QK / 2];
        }
        acc += d * s;
    }
    acc
}

/// Reference dot of row `r` of a matrix of GGUF blocks `B` with f32 activations: each block
/// dequantised (`ggml`), its products summed in f32 in element order, blocks accumulated in order.
pub fn dot_ggml<B: Block>(w: Mat<'_>, r: usize, x: &[f32]) -> f32 {
    let nb = w.cols() / B::QK;
    let mut deq = [0f32; QK_K];
    let mut acc = 0f32;
    for (blk, xb) in ggml::blocks::<B>(w.bytes())[r * nb..(r + 1) * nb].iter().zip(x.chunks_exact(B::QK)) {
        blk.dequantize(&mut deq);
        let s: f32 = deq.iter().zip(xb).map(|(&a, &v)| a * v).sum();
        acc += s;
    }
    acc
}

/// Row `r` of a float matrix · x.
fn dot_row_f32(w: Mat<'_>, r: usize, x: &[f32]) -> f32 {
    let c = w.cols();
    dot_f32(&w.as_f32()[r * c..(r + 1) * c], x)
}

fn dot_row_f16(w: Mat<'_>, r: usize, x: &[f32]) -> f32 {
    let c = w.cols();
    dot_f16(&w.as_u16()[r * c..(r + 1) * c], x)
}

fn dot_row_bf16(w: Mat<'_>, r: usize, x: &[f32]) -> f32 {
    let c = w.cols();
    dot_bf16(&w.as_u16()[r * c..(r + 1) * c], x)
}

/// Row `r` of a bf16r32 matrix · x: `dot_bf16`'s sum over the row's elements where its group's
/// units hold them (`format::tiles`).
fn dot_row_bf16r32(w: Mat<'_>, r: usize, x: &[f32]) -> f32 {
    let (c, bits) = (w.cols(), w.as_u16());
    dot_by(c, x, |i| bf16_to_f32(bits[tiles::at(r, i, c)]))
}

/// Row r of w · x (f32 activations).
pub(crate) type RowDot = fn(w: Mat<'_>, r: usize, x: &[f32]) -> f32;
/// Row r of w · activation row t of int8 blocks.
pub(crate) type RowDotI8 = fn(w: Mat<'_>, r: usize, xa: &QuantizedActs, t: usize) -> f32;

/// The scalar specification of one dtype's products, which the portable path runs and every
/// SIMD path is tested against.
pub(crate) struct RefKernels {
    /// The row's dtype (rows are indexed by `DType::index()`; a test checks the order).
    pub dtype: DType,
    pub dot: RowDot,
    /// Block dtypes only.
    pub dot_i8: Option<RowDotI8>,
}

/// The reference rows, indexed by `DType::index()` (the format's dtype table order).
pub(crate) const ROWS: [RefKernels; DType::COUNT] = [
    RefKernels { dtype: DType::F32, dot: dot_row_f32, dot_i8: None },
    RefKernels { dtype: DType::F16, dot: dot_row_f16, dot_i8: None },
    RefKernels { dtype: DType::BF16, dot: dot_row_bf16, dot_i8: None },
    RefKernels { dtype: DType::Q8, dot: dot_q8, dot_i8: Some(actq::dot_q8_i8) },
    RefKernels { dtype: DType::Q4, dot: dot_q4, dot_i8: Some(actq::dot_q4_i8) },
    RefKernels { dtype: DType::Q8R8, dot: dot_q8, dot_i8: Some(actq::dot_q8_i8) },
    RefKernels { dtype: DType::Q4R8, dot: dot_q4, dot_i8: Some(actq::dot_q4_i8) },
    RefKernels { dtype: DType::Q8_0, dot: dot_q8_0, dot_i8: Some(actq::dot_q8_0_i8) },
    RefKernels { dtype: DType::Mxfp4, dot: dot_mxfp4, dot_i8: Some(actq::dot_mxfp4_i8) },
    ggml_row::<ggml::BlockQ4_0>(DType::Q4_0),
    ggml_row::<ggml::BlockQ4_1>(DType::Q4_1),
    ggml_row::<ggml::BlockQ5_0>(DType::Q5_0),
    ggml_row::<ggml::BlockQ5_1>(DType::Q5_1),
    ggml_row::<ggml::BlockQ2K>(DType::Q2K),
    ggml_row::<ggml::BlockQ3K>(DType::Q3K),
    ggml_row::<ggml::BlockQ4K>(DType::Q4K),
    ggml_row::<ggml::BlockQ5K>(DType::Q5K),
    ggml_row::<ggml::BlockQ6K>(DType::Q6K),
    ggml_row::<ggml::BlockIq4Nl>(DType::Iq4Nl),
    ggml_row::<ggml::BlockIq4Xs>(DType::Iq4Xs),
    RefKernels { dtype: DType::Mxfp4R8, dot: dot_mxfp4, dot_i8: Some(actq::dot_mxfp4_i8) },
    RefKernels { dtype: DType::Q4KR8, dot: kr8ref::dot::<ggml::BlockQ4K>, dot_i8: Some(kr8ref::dot_i8_q4k) },
    RefKernels { dtype: DType::Q6KR8, dot: kr8ref::dot::<ggml::BlockQ6K>, dot_i8: Some(kr8ref::dot_i8_q6k) },
    RefKernels { dtype: DType::Iq4XsR8, dot: kr8ref::dot::<ggml::BlockIq4Xs>, dot_i8: Some(kr8ref::dot_i8_iq4xs) },
    RefKernels { dtype: DType::Iq4NlR8, dot: kr8ref::dot::<ggml::BlockIq4Nl>, dot_i8: Some(kr8ref::dot_i8_iq4nl) },
    RefKernels { dtype: DType::Bf16R32, dot: dot_row_bf16r32, dot_i8: None },
];

/// The reference row of GGUF block type `B`.
const fn ggml_row<B: Block>(dtype: DType) -> RefKernels {
    RefKernels { dtype, dot: dot_ggml::<B>, dot_i8: Some(actq::dot_ggml_i8::<B>) }
}

/// The reference row of `dtype`.
#[inline]
pub(crate) fn row(dtype: DType) -> &'static RefKernels {
    let r = &ROWS[dtype.index()];
    debug_assert_eq!(r.dtype, dtype, "reference::ROWS out of DType order");
    r
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::format::blocks::sample;

    #[test]
    fn reference_dots_equal_dot_of_dequantised_rows() {
        let (rows, cols) = (3, 96);
        let w = sample(rows * cols, 3);
        let x = sample(cols, 4);
        let (b8, b4) = (DType::Q8.encode(&w, cols), DType::Q4.encode(&w, cols));
        let m8 = Mat::new(DType::Q8, rows, cols, &b8).unwrap();
        let m4 = Mat::new(DType::Q4, rows, cols, &b4).unwrap();
        for r in 0..rows {
            let mut deq = vec![0f32; cols];
            m8.row_to_f32(r, &mut deq);
            let want: f64 = deq.iter().zip(&x).map(|(a, b)| f64::from(*a) * f64::from(*b)).sum();
            assert!((f64::from(dot_q8(m8, r, &x)) - want).abs() < 1e-4);
            m4.row_to_f32(r, &mut deq);
            let want: f64 = deq.iter().zip(&x).map(|(a, b)| f64::from(*a) * f64::from(*b)).sum();
            assert!((f64::from(dot_q4(m4, r, &x)) - want).abs() < 1e-4);
        }
    }

    #[test]
    fn the_rows_follow_the_dtype_table() {
        for &d in DType::ALL {
            assert_eq!(row(d).dtype, d, "reference::ROWS is not in DType order");
            assert_eq!(row(d).dot_i8.is_some(), d.is_quantized(), "{d}");
        }
    }
}
