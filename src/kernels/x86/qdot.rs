//! AVX2 W8A8 / W4A8 matrix-vector kernels: quantised weight blocks against int8 activation
//! blocks (see `kernels::actq` for the reference semantics). Per 32-weight block: one
//! `vpmaddubsw` (unsigned × signed byte pairs → i16; q4 nibbles are unsigned 0..15, q8 weights
//! take their sign into the activations) and one `vpmaddwd` to i32, converted once and scaled by
//! dw·dx, eight block scales converted at a time. The q4 offset of 8 is subtracted in integers
//! (8 · Σ x per block, computed once per activation block for all rows), so the block sums are
//! exactly the reference's. Four weight rows share each activation load.

use super::super::actq::QuantizedActs;
use super::super::mat::Mat;
use super::gemv::hsum;
use crate::format::blocks::QK;
use core::arch::x86_64::*;
use std::ops::Range;

/// Integer block products of one weight block (Q4: 16 packed bytes; Q8: 32 bytes) with 32
/// activation bytes, as 8 i32 lanes.
#[inline]
#[target_feature(enable = "avx2,fma,f16c")]
unsafe fn block_dot<const Q4: bool>(w: *const u8, x: __m256i) -> __m256i {
    // SAFETY: reached only through the AVX2 table (the CPU has AVX2, FMA and F16C); the
    // caller passes pointers valid for the ranges this function's comment names.
    unsafe {
        let ones = _mm256_set1_epi16(1);
        let pairs = if Q4 {
            // Both lanes hold the 16 bytes; the high lane shifted by 4 brings the high nibbles down.
            let raw = _mm256_broadcastsi128_si256(_mm_loadu_si128(w.cast()));
            let shifted = _mm256_srlv_epi32(raw, _mm256_setr_epi32(0, 0, 0, 0, 4, 4, 4, 4));
            let nib = _mm256_and_si256(shifted, _mm256_set1_epi8(15));
            _mm256_maddubs_epi16(nib, x)
        } else {
            let wv = _mm256_loadu_si256(w.cast());
            _mm256_maddubs_epi16(_mm256_sign_epi8(wv, wv), _mm256_sign_epi8(x, wv))
        };
        _mm256_madd_epi16(pairs, ones)
    }
}

/// 8 · (x_2i + x_2i+1 + x_2i+2 + x_2i+3) per i32 lane: what the q4 offset of 8 contributes.
#[inline]
#[target_feature(enable = "avx2,fma,f16c")]
unsafe fn offset_sums(x: __m256i) -> __m256i {
    _mm256_madd_epi16(_mm256_maddubs_epi16(_mm256_set1_epi8(8), x), _mm256_set1_epi16(1))
}

/// out[r] = row r (of R rows, `row_bytes` apart, scales `nb` apart) · activation row (xq, xd).
#[allow(clippy::too_many_arguments, clippy::needless_range_loop)] // j indexes blocks and scales alike
#[inline]
#[target_feature(enable = "avx2,fma,f16c")]
unsafe fn rows_dot<const Q4: bool, const R: usize>(
    qs: *const u8,
    row_bytes: usize,
    d: *const u16,
    nb: usize,
    xq: *const i8,
    xd: *const f32,
    out: &mut [f32; R],
) {
    let bbytes = if Q4 { QK / 2 } else { QK };
    // SAFETY: reached only through the AVX2 table (the CPU has AVX2, FMA and F16C); the
    // caller passes pointers valid for the ranges this function's comment names.
    unsafe {
        let mut acc = [_mm256_setzero_ps(); R];
        let mut b = 0;
        while b + 8 <= nb {
            let xdv = _mm256_loadu_ps(xd.add(b));
            // dw·dx of the next 8 blocks per row, kept in memory: the inner loop broadcasts each
            // from there (a load instead of a lane shuffle: +2–4 % q8 decode measured).
            let mut dd = [[0f32; 8]; R];
            for (r, ddr) in dd.iter_mut().enumerate() {
                let v = _mm256_mul_ps(_mm256_cvtph_ps(_mm_loadu_si128(d.add(r * nb + b).cast())), xdv);
                _mm256_storeu_ps(ddr.as_mut_ptr(), v);
                // The next row group's bytes at this column: rows are short (a few KiB), so the
                // hardware streams restart every group; fetching one group ahead keeps them busy.
                let ahead = qs.wrapping_add((r + R) * row_bytes + b * bbytes);
                for line in (0..8 * bbytes).step_by(64) {
                    _mm_prefetch::<_MM_HINT_T0>(ahead.wrapping_add(line).cast());
                }
            }
            for j in 0..8 {
                let x = _mm256_loadu_si256(xq.add((b + j) * QK).cast());
                let off = if Q4 { offset_sums(x) } else { _mm256_setzero_si256() };
                for r in 0..R {
                    let p = block_dot::<Q4>(qs.add(r * row_bytes + (b + j) * bbytes), x);
                    let p = if Q4 { _mm256_sub_epi32(p, off) } else { p };
                    let s = _mm256_broadcast_ss(&dd[r][j]);
                    acc[r] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(p), s, acc[r]);
                }
            }
            b += 8;
        }
        while b < nb {
            let x = _mm256_loadu_si256(xq.add(b * QK).cast());
            let off = if Q4 { offset_sums(x) } else { _mm256_setzero_si256() };
            for (r, accr) in acc.iter_mut().enumerate() {
                let p = block_dot::<Q4>(qs.add(r * row_bytes + b * bbytes), x);
                let p = if Q4 { _mm256_sub_epi32(p, off) } else { p };
                let dw = _mm_cvtss_f32(_mm_cvtph_ps(_mm_cvtsi32_si128(i32::from(*d.add(r * nb + b)))));
                *accr = _mm256_fmadd_ps(_mm256_cvtepi32_ps(p), _mm256_set1_ps(dw * *xd.add(b)), *accr);
            }
            b += 1;
        }
        for r in 0..R {
            out[r] = hsum(acc[r]);
        }
    }
}

/// out[t·rows.len() + i] = w[rows.start + i] · activation row t, for a row-major q8 / q4 `w`.
pub fn gemv_i8<const Q4: bool>(w: Mat<'_>, rows: Range<usize>, xa: &QuantizedActs, n: usize, out: &mut [f32]) {
    let cols = w.cols();
    let nb = cols / QK;
    assert!(xa.cols == cols && xa.qs.len() >= n * cols && out.len() >= n * rows.len());
    let (qs, d, row_bytes) = if Q4 {
        let q = w.q4();
        (q.qs.as_ptr(), q.d, cols / 2)
    } else {
        let q = w.q8();
        (q.qs.as_ptr().cast::<u8>(), q.d, cols)
    };
    assert!(rows.end <= w.rows());
    let len = rows.len();
    let mut r = rows.start;
    while r < rows.end {
        let (qr, dr) = (qs.wrapping_add(r * row_bytes), d[r * nb..].as_ptr());
        // Four rows per pass (eight measured 15 % slower for q4 here: more live registers
        // and prefetch streams than the integer pipeline gains).
        let take = if rows.end - r >= 4 { 4 } else { 1 };
        // Every activation row against this block of weight rows while it is in L1.
        for t in 0..n {
            let (xq, xd) = xa.row(t);
            let (xq, xd) = (xq.as_ptr(), xd.as_ptr());
            let at = t * len + r - rows.start;
            // SAFETY: the AVX2 table is only reachable on AVX2+FMA+F16C CPUs; rows r..r+take are
            // below rows.end ≤ w.rows() (asserted), whose blocks lie inside the bound matrix.
            unsafe {
                if take == 4 {
                    let mut o = [0f32; 4];
                    rows_dot::<Q4, 4>(qr, row_bytes, dr, nb, xq, xd, &mut o);
                    out[at..at + 4].copy_from_slice(&o);
                } else {
                    let mut o = [0f32; 1];
                    rows_dot::<Q4, 1>(qr, row_bytes, dr, nb, xq, xd, &mut o);
                    out[at] = o[0];
                }
            }
        }
        r += take;
    }
}
