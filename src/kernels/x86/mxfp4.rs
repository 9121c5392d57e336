//! AVX2 kernels of MXFP4 matrices (`format::mxfp4`, ggml's blocks): a block's 16 nibble bytes
//! become its 32 doubled e2m1 values as int8 with one `vpshufb` through `KVALUES` (low nibbles
//! = elements 0..16, high nibbles = 16..32). Against int8 activations (W4A8) the products are
//! exact in integers (`vpmaddubsw` with the sign trick, then `vpmaddwd`) and each block's sum
//! is scaled by d·dx and accumulated as the reference does (bit for bit); against f32 activations the values are widened to f32
//! and summed in 8 lanes, then scaled by d; widening multiplies each value by d, as the
//! reference dequantiser does (bit for bit).

use super::super::actq::QuantizedActs;
use super::super::mat::Mat;
use super::gemv::hsum;
use crate::format::blocks::QK;
use crate::format::mxfp4::{e8m0_to_f32_half, BLOCK_BYTES, KVALUES};
use core::arch::x86_64::*;
use std::ops::Range;

/// The 32 values of the block at `b` (17 bytes) as int8: lane j < 16 holds element j, lane
/// 16 + j element 16 + j.
#[inline]
#[target_feature(enable = "avx2,fma,f16c")]
unsafe fn values(b: *const u8) -> __m256i {
    // SAFETY: reached only through the AVX2 table; the caller passes a whole block.
    unsafe {
        let table = _mm_loadu_si128(KVALUES.as_ptr().cast());
        let q = _mm_loadu_si128(b.add(1).cast());
        let mask = _mm_set1_epi8(15);
        let lo = _mm_shuffle_epi8(table, _mm_and_si128(q, mask));
        let hi = _mm_shuffle_epi8(table, _mm_and_si128(_mm_srli_epi16(q, 4), mask));
        _mm256_set_m128i(hi, lo)
    }
}

/// Row of `nb` blocks at `w` · one int8 activation row (xq, xd): Σ_b d_b·dx_b·Σ_i v_i·q_i, the
/// block sums exact in integers and accumulated in block order as the reference does (the
/// result is the reference's bit for bit).
#[inline]
#[target_feature(enable = "avx2,fma,f16c")]
unsafe fn row_dot_i8(w: *const u8, nb: usize, xq: *const i8, xd: *const f32) -> f32 {
    // SAFETY: reached only through the AVX2 table; the caller passes a row of nb blocks and an
    // activation row of nb blocks.
    unsafe {
        let ones = _mm256_set1_epi16(1);
        let mut acc = 0f32;
        for b in 0..nb {
            let blk = w.add(b * BLOCK_BYTES);
            let v = values(blk);
            let x = _mm256_loadu_si256(xq.add(b * QK).cast());
            // |v| ≤ 12: the sign trick keeps vpmaddubsw's unsigned operand exact.
            let pairs = _mm256_maddubs_epi16(_mm256_sign_epi8(v, v), _mm256_sign_epi8(x, v));
            let s = hsum_i32(_mm256_madd_epi16(pairs, ones));
            acc += e8m0_to_f32_half(*blk) * *xd.add(b) * s as f32;
        }
        acc
    }
}

/// Row of `nb` blocks at `w` · R int8 activation rows at once: each block unpacked once for all
/// R rows, every sum formed exactly as `row_dot_i8` forms it (its result bit for bit).
#[inline]
#[target_feature(enable = "avx2,fma,f16c")]
unsafe fn rows_dot_i8<const R: usize>(w: *const u8, nb: usize, xq: [*const i8; R], xd: [*const f32; R]) -> [f32; R] {
    // SAFETY: reached only through the AVX2 table; the caller passes a row of nb blocks and R
    // activation rows of nb blocks.
    unsafe {
        let ones = _mm256_set1_epi16(1);
        let mut acc = [0f32; R];
        for b in 0..nb {
            let blk = w.add(b * BLOCK_BYTES);
            let v = values(blk);
            let av = _mm256_sign_epi8(v, v);
            let d = e8m0_to_f32_half(*blk);
            for t in 0..R {
                let x = _mm256_loadu_si256(xq[t].add(b * QK).cast());
                let pairs = _mm256_maddubs_epi16(av, _mm256_sign_epi8(x, v));
                let s = hsum_i32(_mm256_madd_epi16(pairs, ones));
                acc[t] += d * *xd[t].add(b) * s as f32;
            }
        }
        acc
    }
}

/// The sum of 8 i32 lanes (exact: |Σ| ≤ 32 · 12 · 127).
#[inline]
#[target_feature(enable = "avx2,fma,f16c")]
unsafe fn hsum_i32(v: __m256i) -> i32 {
    let s = _mm_add_epi32(_mm256_castsi256_si128(v), _mm256_extracti128_si256(v, 1));
    let s = _mm_add_epi32(s, _mm_shuffle_epi32(s, 0b01_00_11_10));
    _mm_cvtsi128_si32(_mm_add_epi32(s, _mm_shuffle_epi32(s, 0b10_11_00_01)))
}

/// The 32 values of block `blk` widened to f32 (4 × 8 lanes, element order).
#[inline]
#[target_feature(enable = "avx2,fma,f16c")]
unsafe fn values_f32(blk: *const u8) -> [__m256; 4] {
    // SAFETY: reached only through the AVX2 table; the caller passes a whole block.
    unsafe {
        let v = values(blk);
        let (lo, hi) = (_mm256_castsi256_si128(v), _mm256_extracti128_si256(v, 1));
        [
            _mm256_cvtepi32_ps(_mm256_cvtepi8_epi32(lo)),
            _mm256_cvtepi32_ps(_mm256_cvtepi8_epi32(_mm_srli_si128(lo, 8))),
            _mm256_cvtepi32_ps(_mm256_cvtepi8_epi32(hi)),
            _mm256_cvtepi32_ps(_mm256_cvtepi8_epi32(_mm_srli_si128(hi, 8))),
        ]
    }
}

/// Row of `nb` blocks at `w` · x (f32): Σ_b d_b · Σ_i v_i·x_i.
#[inline]
#[target_feature(enable = "avx2,fma,f16c")]
unsafe fn row_dot(w: *const u8, nb: usize, x: *const f32) -> f32 {
    // SAFETY: reached only through the AVX2 table; the caller passes a row of nb blocks and
    // nb·32 activations.
    unsafe {
        let mut acc = _mm256_setzero_ps();
        for b in 0..nb {
            let blk = w.add(b * BLOCK_BYTES);
            let v = values_f32(blk);
            let xb = x.add(b * QK);
            let mut s = _mm256_mul_ps(v[0], _mm256_loadu_ps(xb));
            for (k, vk) in v.iter().enumerate().skip(1) {
                s = _mm256_fmadd_ps(*vk, _mm256_loadu_ps(xb.add(8 * k)), s);
            }
            acc = _mm256_fmadd_ps(s, _mm256_set1_ps(e8m0_to_f32_half(*blk)), acc);
        }
        hsum(acc)
    }
}

/// out[t·rows.len() + i] = w[rows.start + i] · activation row t (see `table::GemvI8Fn`).
pub fn gemv_i8(w: Mat<'_>, rows: Range<usize>, xa: &QuantizedActs, n: usize, out: &mut [f32]) {
    let (cols, len) = (w.cols(), rows.len());
    let nb = cols / QK;
    assert!(rows.end <= w.rows() && xa.cols == cols && xa.qs.len() >= n * cols && out.len() >= n * len);
    let base = w.bytes().as_ptr();
    for (i, r) in rows.enumerate() {
        let wr = base.wrapping_add(r * nb * BLOCK_BYTES);
        // Four activation rows per pass over the weight row (each block unpacked once for them).
        let mut t = 0;
        while t + 4 <= n {
            let rows4: [(&[i8], &[f32]); 4] = [xa.row(t), xa.row(t + 1), xa.row(t + 2), xa.row(t + 3)];
            // SAFETY: as below, for activation rows t..t + 4 (< n, each of nb blocks).
            let y = unsafe { rows_dot_i8::<4>(wr, nb, rows4.map(|x| x.0.as_ptr()), rows4.map(|x| x.1.as_ptr())) };
            for (k, v) in y.into_iter().enumerate() {
                out[(t + k) * len + i] = v;
            }
            t += 4;
        }
        for t in t..n {
            let (xq, xd) = xa.row(t);
            // SAFETY: the AVX2 table exists only on AVX2+FMA+F16C CPUs; row r < w.rows()
            // (asserted) has its nb blocks inside the bound matrix, activation row t its nb blocks.
            out[t * len + i] = unsafe { row_dot_i8(wr, nb, xq.as_ptr(), xd.as_ptr()) };
        }
    }
}

/// out[t·rows.len() + i] = w[rows.start + i] · x[t] (see `table::GemvFn`).
pub fn gemv(w: Mat<'_>, rows: Range<usize>, x: &[f32], n: usize, out: &mut [f32]) {
    let (cols, len) = (w.cols(), rows.len());
    let nb = cols / QK;
    assert!(rows.end <= w.rows() && x.len() >= n * cols && out.len() >= n * len);
    let base = w.bytes().as_ptr();
    for (i, r) in rows.enumerate() {
        for t in 0..n {
            // SAFETY: as in `gemv_i8`; x row t holds cols values (asserted).
            out[t * len + i] = unsafe { row_dot(base.add(r * nb * BLOCK_BYTES), nb, x[t * cols..].as_ptr()) };
        }
    }
}

/// out[i] = w[rows.start + i, k0 .. k0 + kc] as f32 (see `table::WidenFn`).
pub fn widen(w: Mat<'_>, rows: Range<usize>, k0: usize, out: &mut [f32]) {
    let (cols, kc) = (w.cols(), out.len() / rows.len().max(1));
    assert!(k0 + kc <= cols && rows.end <= w.rows() && k0.is_multiple_of(QK) && kc % QK == 0);
    let base = w.bytes().as_ptr();
    for (r, o) in rows.zip(out.chunks_exact_mut(kc.max(1))) {
        for (b, ob) in o.chunks_exact_mut(QK).enumerate() {
            let blk = (r * cols + k0) / QK + b;
            // SAFETY: AVX2 table only on AVX2+FMA+F16C CPUs; block blk lies inside the bound
            // matrix (asserted above) and ob holds 32 values.
            unsafe {
                let p = base.add(blk * BLOCK_BYTES);
                let d = _mm256_set1_ps(e8m0_to_f32_half(*p));
                for (k, v) in values_f32(p).into_iter().enumerate() {
                    _mm256_storeu_ps(ob.as_mut_ptr().add(8 * k), _mm256_mul_ps(v, d));
                }
            }
        }
    }
}
