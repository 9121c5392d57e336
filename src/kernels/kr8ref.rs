//! Scalar reference products of the interleaved K-quants (q4_kr8 / q6_kr8 / iq4_xsr8 / iq4_nlr8,
//! `format::kr8`): the
//! specification the SIMD kernels of `x86::kr8` reproduce bit for bit. Each row's block is taken
//! out of its unit; the integer sums per 32-element sub-block are the exact ones, and the float
//! operations are fixed here (fused multiply-adds, one accumulator per row, blocks and
//! sub-blocks in order) so that a vector lane holding one row does exactly the same.

use super::actq::QuantizedActs;
use super::mat::Mat;
use crate::format::blocks::QK;
use crate::format::ggml::{
    h, iq4xs_scale, scale_min_k4, BlockIq4Nl, BlockIq4Xs, BlockQ4K, BlockQ6K, KVALUES_IQ4NL, QK_K,
};
use crate::format::kr8::{row_block, Interleave};

/// Row `r` · x with f32 activations: each block dequantised (ggml's values), its products
/// summed in f32 in element order, blocks accumulated in order (as `reference::dot_ggml`).
pub fn dot<B: Interleave>(w: Mat<'_>, r: usize, x: &[f32]) -> f32 {
    let nb = w.cols() / B::QK;
    let mut deq = [0f32; QK_K];
    let mut acc = 0f32;
    for (b, xb) in x[..w.cols()].chunks_exact(B::QK).enumerate() {
        row_block::<B>(w.bytes(), nb, r, b).dequantize(&mut deq);
        acc += deq[..B::QK].iter().zip(xb).map(|(&a, &v)| a * v).sum::<f32>();
    }
    acc
}

/// Σ_i a[i]·x[i] over 32 unsigned quants and int8 activations, exact in i32.
fn isum(q: impl Iterator<Item = i32>, x: &[i8]) -> i32 {
    q.zip(x).map(|(a, &c)| a * i32::from(c)).sum()
}

/// Row `r` of a q4_kr8 matrix · int8 activation row t: per block and sub-block j (scale sc,
/// min m, activation block scale dx and quant sum Σqx), with s = Σ q·qx over the nibbles:
///     acc = fma(s, (d·sc)·dx, acc);  acc = fma(−(dmin·m), dx·Σqx, acc).
pub fn dot_i8_q4k(w: Mat<'_>, r: usize, xa: &QuantizedActs, t: usize) -> f32 {
    let (xq, xd) = xa.row(t);
    let sums = xa.row_sums(t);
    let nb = w.cols() / QK_K;
    let mut acc = 0f32;
    for b in 0..nb {
        let blk: BlockQ4K = row_block(w.bytes(), nb, r, b);
        let (d, dmin) = (h(blk.d), h(blk.dmin));
        for j in 0..8 {
            let qs = &blk.qs[32 * (j / 2)..32 * (j / 2) + 32];
            let s = isum(qs.iter().map(|&v| i32::from((v >> (4 * (j % 2))) & 15)), &xq[QK_K * b + QK * j..][..QK]);
            let (sc, m) = scale_min_k4(j, &blk.scales);
            let (dx, k) = (xd[8 * b + j], 8 * b + j);
            acc = (s as f32).mul_add((d * f32::from(sc)) * dx, acc);
            acc = (-(dmin * f32::from(m))).mul_add(dx * sums[k] as f32, acc);
        }
    }
    acc
}

/// Row `r` of a q6_kr8 matrix · int8 activation row t: per block and sub-block s = 4n + i, with
/// the integer sum S = Σ_half k_half · Σ (q − 32)·qx over its two halves of 16 (q the 6-bit
/// quant, k the i8 scales 8n + 2i and 8n + 2i + 1):  acc = fma(S, d·dx, acc).
pub fn dot_i8_q6k(w: Mat<'_>, r: usize, xa: &QuantizedActs, t: usize) -> f32 {
    let (xq, xd) = xa.row(t);
    let nb = w.cols() / QK_K;
    let mut acc = 0f32;
    for b in 0..nb {
        let blk: BlockQ6K = row_block(w.bytes(), nb, r, b);
        let d = h(blk.d);
        for s in 0..8 {
            let (n, i) = (s / 4, s % 4);
            let ql = &blk.ql[64 * n + 32 * (i % 2)..][..32];
            let qh = &blk.qh[32 * n..][..32];
            let q = |l: usize| i32::from(((ql[l] >> (4 * (i / 2))) & 15) | (((qh[l] >> (2 * i)) & 3) << 4)) - 32;
            let x = &xq[QK_K * b + QK * s..][..QK];
            let halves = [0, 1].map(|hf| {
                let k = i32::from(blk.scales[8 * n + 2 * i + hf] as i8);
                k * isum((16 * hf..16 * hf + 16).map(q), &x[16 * hf..16 * hf + 16])
            });
            acc = ((halves[0] + halves[1]) as f32).mul_add(d * xd[8 * b + s], acc);
        }
    }
    acc
}

/// Row `r` of an iq4_xsr8 matrix · int8 activation row t: per block and sub-block j (6-bit
/// scale ls), with s = Σ K[q]·qx over its 32 levels:  acc = fma(s, (d·(ls − 32))·dx, acc).
pub fn dot_i8_iq4xs(w: Mat<'_>, r: usize, xa: &QuantizedActs, t: usize) -> f32 {
    let (xq, xd) = xa.row(t);
    let nb = w.cols() / QK_K;
    let mut acc = 0f32;
    for b in 0..nb {
        let blk: BlockIq4Xs = row_block(w.bytes(), nb, r, b);
        let d = h(blk.d);
        for j in 0..8 {
            let s = iq4_isum(&blk.qs[16 * j..16 * j + 16], &xq[QK_K * b + QK * j..][..QK]);
            let f = (d * (iq4xs_scale(&blk, j) - 32) as f32) * xd[8 * b + j];
            acc = (s as f32).mul_add(f, acc);
        }
    }
    acc
}

/// Σ K[q]·qx over one 32-element iq4 block's 16 nibble bytes (element i in the low nibble of
/// byte i, i + 16 in its high one), exact in i32.
fn iq4_isum(qs: &[u8], x: &[i8]) -> i32 {
    isum((0..QK).map(|i| i32::from(KVALUES_IQ4NL[usize::from((qs[i % 16] >> (4 * (i / 16))) & 15)])), x)
}

/// Row `r` of an iq4_nlr8 matrix · int8 activation row t: per block b, with s = Σ K[q]·qx:
///     acc = fma(s, d·dx, acc).
pub fn dot_i8_iq4nl(w: Mat<'_>, r: usize, xa: &QuantizedActs, t: usize) -> f32 {
    let (xq, xd) = xa.row(t);
    let nb = w.cols() / QK;
    let mut acc = 0f32;
    for b in 0..nb {
        let blk: BlockIq4Nl = row_block(w.bytes(), nb, r, b);
        let s = iq4_isum(&blk.qs, &xq[QK * b..][..QK]);
        acc = (s as f32).mul_add(h(blk.d) * xd[b], acc);
    }
    acc
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::format::DType;
    use crate::kernels::actq::quantize_blocks;

    /// The int8 references agree with dequantise-then-dot of the dequantised activations.
    #[test]
    fn int8_references_are_dequantise_then_dot() {
        let (rows, cols) = (16, 512);
        let w: Vec<f32> = (0..rows * cols).map(|i| ((i * 7919 % 1013) as f32 / 506.0 - 1.0) * 0.3).collect();
        let x: Vec<f32> = (0..cols).map(|i| ((i * 31 % 97) as f32 / 48.0 - 1.0) * 2.0).collect();
        let mut xa = QuantizedActs::default();
        xa.quantize_with(quantize_blocks, &x, 1, cols);
        let mut xd = vec![0f32; cols];
        xa.dequantize(&mut xd);
        for (dtype, f) in [
            (DType::Q4KR8, dot_i8_q4k as crate::kernels::reference::RowDotI8),
            (DType::Q6KR8, dot_i8_q6k),
            (DType::Iq4XsR8, dot_i8_iq4xs),
            (DType::Iq4NlR8, dot_i8_iq4nl),
        ] {
            let bytes = dtype.encode(&w, cols);
            let m = Mat::new(dtype, rows, cols, &bytes).unwrap();
            let mut row = vec![0f32; cols];
            for r in 0..rows {
                m.row_to_f32(r, &mut row);
                let want: f64 = row.iter().zip(&xd).map(|(&a, &b)| f64::from(a) * f64::from(b)).sum();
                let mag: f64 = row.iter().zip(&xd).map(|(&a, &b)| (f64::from(a) * f64::from(b)).abs()).sum();
                let got = f(m, r, &xa, 0);
                assert!((f64::from(got) - want).abs() <= 1e-5 * mag, "{dtype} row {r}: {got} vs {want}");
            }
        }
    }
}
