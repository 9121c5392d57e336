//! Int8 activations for quantised weights (the W8A8 / W4A8 decode path): each activation row is
//! quantised once per product (once for several products over the same rows: `Kernels::matmuls`)
//! to blocks of 32 int8 values with an f32 scale, so a weight block meets it in integer
//! arithmetic and only the block sums are scaled in float.
//!
//! Reference semantics (every SIMD path computes the same integers and differs only in the
//! order of the float additions):
//!   W8A8: y = Σ_b dw_b · dx_b · Σ_i qw_i · qx_i
//!   W4A8: y = Σ_b dw_b · dx_b · Σ_i (qw_i − 8) · qx_i
//!   MXFP4: y = Σ_b dw_b · dx_b · Σ_i KVALUES[nibble_i] · qx_i (dw_b = 2^(e_b − 128), ggml's
//!   `vec_dot_mxfp4_q8_0` with these activation blocks)
//! An activation block holding NaN gets a NaN scale, so NaN propagates as in the float paths.

use super::actpanel::ActPanels;
use super::mat::Mat;
use crate::format::blocks::{q8_0_block, Q4, Q8, QK};
use crate::format::ggml::{self, Block, Unpacked};
use crate::format::mxfp4;
use std::sync::OnceLock;

/// How reduced-precision weights meet their activations in matrix products.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum QuantActivations {
    /// Activations rounded to each weight's own arithmetic once per call (llama.cpp's
    /// convention): int8 blocks against block-quantised weights (W8A8 / W4A8, integer dot
    /// products; this module), bf16 against bf16 weights (BF16 × BF16 products, exact in f32,
    /// summed in f32; `bf16act`). f32 and f16 weights meet f32 activations.
    Reduced,
    /// Activations stay f32 for every weight (W8A16 / W4A16 / BF16A32): weights are widened to
    /// f32 in registers.
    Float,
}

impl QuantActivations {
    /// Lower-case name, as `COLIBRI_QUANT_ACT` spells it.
    pub fn name(self) -> &'static str {
        match self {
            QuantActivations::Reduced => "reduced",
            QuantActivations::Float => "float",
        }
    }

    /// The default for new sessions: `COLIBRI_QUANT_ACT=reduced|float` (read once; `int8` is the
    /// earlier name of `reduced`), else reduced.
    pub fn from_env() -> QuantActivations {
        static DEFAULT: OnceLock<QuantActivations> = OnceLock::new();
        *DEFAULT.get_or_init(|| match std::env::var("COLIBRI_QUANT_ACT").as_deref().map(str::trim) {
            Ok("float") | Ok("f32") => QuantActivations::Float,
            _ => QuantActivations::Reduced,
        })
    }
}

impl Default for QuantActivations {
    fn default() -> Self {
        QuantActivations::from_env()
    }
}

/// Int8 activation blocks of x (a multiple of 32 values): quants, scales, sums per block.
pub(crate) type QuantizeFn = fn(x: &[f32], qs: &mut [i8], d: &mut [f32], sums: &mut [i32]);

/// n activation rows of `cols` values quantised per block: qs [n, cols], d [n, cols/32].
#[derive(Default)]
pub struct QuantizedActs {
    pub cols: usize,
    pub qs: Vec<i8>,
    /// Block scales dx_b.
    pub d: Vec<f32>,
    /// Block sums Σ_i qx_i (what the q4 offset of 8 contributes, divided by −8).
    pub sums: Vec<i32>,
    /// The same rows in panels (`actpanel`), built on first use by a kernel that reads them.
    panels: OnceLock<ActPanels>,
    /// 32 · the sum of each 16 quants (q6_k's offset meets them per half block), built on first
    /// use.
    halves: OnceLock<Vec<i32>>,
    /// dx_b · Σ qx per block (q4_k's min meets it), built on first use.
    scaled: OnceLock<Vec<f32>>,
}

impl QuantizedActs {
    /// Quantise x ([n, cols], cols a multiple of 32) with a path's quantiser `f`: dx = max|x| /
    /// 127, qx = round(x / dx) (see `quantize_blocks`).
    pub(crate) fn quantize_with(&mut self, f: QuantizeFn, x: &[f32], n: usize, cols: usize) {
        let nb = n * cols / QK;
        self.cols = cols;
        self.qs.resize(n * cols, 0);
        self.d.resize(nb, 0.0);
        self.sums.resize(nb, 0);
        f(&x[..n * cols], &mut self.qs, &mut self.d, &mut self.sums);
        self.panels = OnceLock::new();
        self.halves = OnceLock::new();
        self.scaled = OnceLock::new();
    }

    /// 32 · Σ qx over each 16 quants ([n, cols / 16]; q6_k's offset of 32 meets them per half
    /// block): built by the first caller, shared by the rest (a product's tasks each read the
    /// whole rows).
    pub(crate) fn half_sums(&self) -> &[i32] {
        self.halves.get_or_init(|| {
            self.qs.chunks_exact(16).map(|c| 32 * c.iter().map(|&v| i32::from(v)).sum::<i32>()).collect()
        })
    }

    /// dx_b · (Σ qx as f32) per block ([n, cols / 32]): built by the first caller, shared by
    /// the rest.
    pub(crate) fn scaled_sums(&self) -> &[f32] {
        self.scaled.get_or_init(|| self.d.iter().zip(&self.sums).map(|(&d, &s)| d * s as f32).collect())
    }

    /// The rows in panels of 8 (`actpanel`): built by the first caller, shared by the rest.
    pub(crate) fn panels(&self) -> &ActPanels {
        self.panels.get_or_init(|| {
            let n = self.qs.len() / self.cols.max(1);
            ActPanels::new(&self.qs, &self.d, &self.sums, n, self.cols)
        })
    }

    /// The activations as the integer path sees them: out[i] = dx_b · qx_i ([n, cols]).
    pub fn dequantize(&self, out: &mut [f32]) {
        for (b, ob) in out[..self.qs.len()].chunks_exact_mut(QK).enumerate() {
            for (o, &q) in ob.iter_mut().zip(&self.qs[b * QK..(b + 1) * QK]) {
                *o = self.d[b] * f32::from(q);
            }
        }
    }

    /// Blocks of activation row t: (quants, scales).
    pub fn row(&self, t: usize) -> (&[i8], &[f32]) {
        let nb = self.cols / QK;
        (&self.qs[t * self.cols..(t + 1) * self.cols], &self.d[t * nb..(t + 1) * nb])
    }

    /// Block sums Σ qx of activation row t.
    pub fn row_sums(&self, t: usize) -> &[i32] {
        let nb = self.cols / QK;
        &self.sums[t * nb..(t + 1) * nb]
    }
}

/// Reference quantiser of activation blocks: for each block b of 32 values of x, d[b] =
/// max|x| / 127 (NaN if the block holds a NaN), qs = round-half-away(x · (1 / d)), sums[b] = Σ qs.
/// A block whose d is 0, NaN or infinite, or so small (subnormal) that 1 / d overflows, gets
/// all-zero quants: every quant stays in [−127, 127] (the sign trick of the W8A8 kernels needs
/// that). Every path must give the same bits.
pub fn quantize_blocks(x: &[f32], qs: &mut [i8], d: &mut [f32], sums: &mut [i32]) {
    for (b, xb) in x.chunks_exact(QK).enumerate() {
        let amax = xb.iter().fold(0f32, |m, v| if v.is_nan() || m.is_nan() { f32::NAN } else { m.max(v.abs()) });
        let db = amax / 127.0;
        let inv = if db > 0.0 && db.is_finite() && (1.0 / db).is_finite() { 1.0 / db } else { 0.0 };
        for (q, &v) in qs[b * QK..(b + 1) * QK].iter_mut().zip(xb) {
            *q = (v * inv).round() as i8;
        }
        sums[b] = qs[b * QK..(b + 1) * QK].iter().map(|&q| i32::from(q)).sum();
        d[b] = db;
    }
}

/// Reference W8A8 dot of row r of a q8 / q8r8 `w` with activation row t of `xa`.
pub fn dot_q8_i8(w: Mat<'_>, r: usize, xa: &QuantizedActs, t: usize) -> f32 {
    let w: Q8<'_> = w.q8();
    let (xq, xd) = xa.row(t);
    let nb = xa.cols / QK;
    let mut acc = 0f32;
    for b in 0..nb {
        let wq = w.block(r * nb + b);
        let s: i32 = wq.iter().zip(&xq[b * QK..(b + 1) * QK]).map(|(&a, &c)| i32::from(a) * i32::from(c)).sum();
        acc += w.scale(r * nb + b) * xd[b] * s as f32;
    }
    acc
}

/// Reference W8A8 dot of row r of a q8_0 `w` with activation row t of `xa`.
pub fn dot_q8_0_i8(w: Mat<'_>, r: usize, xa: &QuantizedActs, t: usize) -> f32 {
    let (xq, xd) = xa.row(t);
    let nb = xa.cols / QK;
    let mut acc = 0f32;
    for b in 0..nb {
        let (dw, wq) = q8_0_block(w.bytes(), r * nb + b);
        let s: i32 = wq.iter().zip(&xq[b * QK..(b + 1) * QK]).map(|(&a, &c)| i32::from(a as i8) * i32::from(c)).sum();
        acc += dw * xd[b] * s as f32;
    }
    acc
}

/// Reference W4A8 dot of row r of an mxfp4 (or mxfp4r8) `w` with activation row t of `xa`.
pub fn dot_mxfp4_i8(w: Mat<'_>, r: usize, xa: &QuantizedActs, t: usize) -> f32 {
    let (xq, xd) = xa.row(t);
    let nb = xa.cols / QK;
    let mut acc = 0f32;
    for b in 0..nb {
        let (e, qs) = mxfp4::block_in(w.bytes(), w.layout(), r * nb + b);
        let dw = mxfp4::e8m0_to_f32_half(e);
        let xb = &xq[b * QK..(b + 1) * QK];
        let s: i32 = qs
            .iter()
            .enumerate()
            .map(|(j, &q)| {
                let (lo, hi) = (mxfp4::KVALUES[usize::from(q & 15)], mxfp4::KVALUES[usize::from(q >> 4)]);
                i32::from(lo) * i32::from(xb[j]) + i32::from(hi) * i32::from(xb[j + QK / 2])
            })
            .sum();
        acc += dw * xd[b] * s as f32;
    }
    acc
}

/// Reference int8-activation dot of row r of a matrix of GGUF blocks `B` with activation row t
/// of `xa`. Each 32-element sub-block in its integer form (`ggml::Unpacked`: w = d·k·q + dm·m
/// per half of 16) meets activation block b in integers:
///   y = Σ_b dx_b · (d · Σ_h k_h·Σ_{i∈h} q_i·qx_i  +  dm · Σ_h m_h·Σ_{i∈h} qx_i)
/// (the dm term only for the types with a min); sub-blocks in order.
pub fn dot_ggml_i8<B: Block>(w: Mat<'_>, r: usize, xa: &QuantizedActs, t: usize) -> f32 {
    let (xq, xd) = xa.row(t);
    let nb = xa.cols / B::QK;
    let subs = B::QK / QK;
    let mut u = Unpacked::default();
    let mut acc = 0f32;
    for (i, blk) in ggml::blocks::<B>(w.bytes())[r * nb..(r + 1) * nb].iter().enumerate() {
        for s in 0..subs {
            blk.unpack(s, &mut u);
            let b = i * subs + s;
            let (qsum, msum) = sub_block_sums(&u, &xq[b * QK..(b + 1) * QK]);
            let mut v = u.d * qsum as f32;
            if u.has_min {
                v += u.dm * msum as f32;
            }
            acc += xd[b] * v;
        }
    }
    acc
}

/// (Σ_h k_h·Σ q·qx, Σ_h m_h·Σ qx) over the two halves of one sub-block.
#[inline]
pub fn sub_block_sums(u: &Unpacked, xq: &[i8]) -> (i32, i32) {
    let (mut qsum, mut msum) = (0i32, 0i32);
    for half in 0..2 {
        let (q, x) = (&u.q[16 * half..16 * half + 16], &xq[16 * half..16 * half + 16]);
        let dot: i32 = q.iter().zip(x).map(|(&a, &c)| i32::from(a) * i32::from(c)).sum();
        let sx: i32 = x.iter().map(|&c| i32::from(c)).sum();
        qsum += u.k[half] * dot;
        msum += u.m[half] * sx;
    }
    (qsum, msum)
}

/// Reference W4A8 dot of row r of a q4 / q4r8 `w` with activation row t of `xa`.
pub fn dot_q4_i8(w: Mat<'_>, r: usize, xa: &QuantizedActs, t: usize) -> f32 {
    let w: Q4<'_> = w.q4();
    let (xq, xd) = xa.row(t);
    let nb = xa.cols / QK;
    let mut acc = 0f32;
    for b in 0..nb {
        let wq = w.block(r * nb + b);
        let xb = &xq[b * QK..(b + 1) * QK];
        let mut s = 0i32;
        for j in 0..QK / 2 {
            s += (i32::from(wq[j] & 15) - 8) * i32::from(xb[j])
                + (i32::from(wq[j] >> 4) - 8) * i32::from(xb[j + QK / 2]);
        }
        acc += w.scale(r * nb + b) * xd[b] * s as f32;
    }
    acc
}
