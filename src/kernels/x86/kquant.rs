//! AVX2 int8-activation matrix-vector kernels of the K-quants (reference: `actq::dot_ggml_i8`):
//! q4_k and q6_k, what GGUF's Q4_K_M files are made of, and q5_k, q3_k, q2_k. Per 32-element
//! sub-block, against the activation block of the same 32 columns: one `vpmaddubsw` (the
//! unsigned quants — q4_k's nibble, q5_k's 5 bits, q6_k's 6 bits and q3_k's 3 before their
//! offset, q2_k's 2 — × the signed activations), then `vpmaddwd` with the sub-block's integer
//! scales (one per 16 for q2_k / q3_k / q6_k: the two lanes of the register take their own), so
//! the integer sums are exactly the reference's; offsets (q3_k's 4, q6_k's 32) are subtracted
//! in i16 (no overflow: |(q − 32)·x| pairs ≤ 8128). Each sub-block's i32 lanes are converted
//! once and scaled by d·dx; mins come from the activation sums (q4_k / q5_k: dmin · Σ_j m_j ·
//! dx_j · Σ x_j, eight sub-blocks at a time; q2_k: its per-16 mins against half sums). Only
//! the float additions are ordered differently from the reference. q4_k and q6_k (Q4_K_M's
//! types) keep a block's eight sub-block sums as integers and reduce them into one vector
//! (`lane_sums`): one conversion and one multiply-add per block instead of eight, and q4_k
//! reads its scales with ggml's word shuffle (`scales_mins_k4`); both prefetch 1 KiB ahead.
//! One weight row meets every activation row while in L1.

use super::super::actq::QuantizedActs;
use super::super::mat::Mat;
use super::gemv::hsum;
use crate::format::blocks::QK;
use crate::format::ggml::{
    blocks, h, q3k_scales, scale_min_k4, Block, BlockQ2K, BlockQ3K, BlockQ4K, BlockQ5K, BlockQ6K, QK_K,
};
use core::arch::x86_64::*;
use std::ops::Range;

/// The activation blocks of one row: quants [cols], scales and block sums [cols / 32].
pub(super) struct Acts<'a> {
    pub q: &'a [i8],
    pub d: &'a [f32],
    pub sums: &'a [i32],
}

/// out[t·rows.len() + i] = w[rows.start + i] · activation row t, one weight row at a time by
/// `row` (the row's stored bytes, activations of those columns), for a dtype of whole blocks.
pub(super) fn drive(
    w: Mat<'_>,
    rows: Range<usize>,
    xa: &QuantizedActs,
    n: usize,
    out: &mut [f32],
    row: unsafe fn(&[u8], &Acts<'_>) -> f32,
) {
    let (cols, info) = (w.cols(), w.dtype().info());
    let row_bytes = cols / info.block as usize * info.block_bytes as usize;
    assert!(xa.cols == cols && xa.qs.len() >= n * cols && out.len() >= n * rows.len() && rows.end <= w.rows());
    let len = rows.len();
    for (i, r) in rows.enumerate() {
        let wr = &w.bytes()[r * row_bytes..(r + 1) * row_bytes];
        for t in 0..n {
            let (q, d) = xa.row(t);
            let acts = Acts { q, d, sums: xa.row_sums(t) };
            // SAFETY: the AVX2 table is only reachable on AVX2+FMA+F16C CPUs; `wr` holds the
            // row's whole blocks and `acts` its cols quants and cols / 32 scales and sums.
            out[t * len + i] = unsafe { row(wr, &acts) };
        }
    }
}

/// See `drive`: row-major q4_k.
pub fn gemv_i8_q4k(w: Mat<'_>, rows: Range<usize>, xa: &QuantizedActs, n: usize, out: &mut [f32]) {
    drive(w, rows, xa, n, out, row_q4k)
}

/// See `drive`: row-major q6_k.
pub fn gemv_i8_q6k(w: Mat<'_>, rows: Range<usize>, xa: &QuantizedActs, n: usize, out: &mut [f32]) {
    drive(w, rows, xa, n, out, row_q6k)
}

/// See `drive`: row-major q5_k.
pub fn gemv_i8_q5k(w: Mat<'_>, rows: Range<usize>, xa: &QuantizedActs, n: usize, out: &mut [f32]) {
    drive(w, rows, xa, n, out, row_qk::<BlockQ5K>)
}

/// The fields of a q5_k block `row_qk` reads (q4_k's too, without the fifth bits).
trait KBlock {
    fn head(&self) -> ([u8; 2], [u8; 2], &[u8; 12]);
    fn qs(&self) -> &[u8; 128];
    /// Bit j of byte l: the fifth bit of sub-block j's element l.
    fn qh(&self) -> Option<&[u8; 32]>;
}

impl KBlock for BlockQ5K {
    fn head(&self) -> ([u8; 2], [u8; 2], &[u8; 12]) {
        (self.d, self.dmin, &self.scales)
    }
    fn qs(&self) -> &[u8; 128] {
        &self.qs
    }
    fn qh(&self) -> Option<&[u8; 32]> {
        Some(&self.qh)
    }
}

/// Bytes ahead of the block being read that the row kernels prefetch (rows of a few KiB are too
/// short for the hardware prefetcher to ramp up; the next row follows the current one).
const AHEAD: usize = 1024;

/// Prefetch the cache line `at` bytes into `wr` (past its end too: the next rows follow it in
/// the matrix; a prefetch never faults).
#[inline(always)]
unsafe fn prefetch(wr: &[u8], at: usize) {
    // SAFETY: a prefetch hint reads nothing architecturally; `wrapping_add` makes no claim
    // about the address.
    unsafe { _mm_prefetch::<_MM_HINT_T0>(wr.as_ptr().wrapping_add(at).cast()) }
}

/// [Σ lanes of v[0], …, Σ lanes of v[7]]: eight i32 sums in one vector (three `vphaddd`
/// levels, then the two 128-bit halves added).
#[inline]
#[target_feature(enable = "avx2,fma,f16c")]
unsafe fn lane_sums(v: [__m256i; 8]) -> __m256i {
    let h01 = _mm256_hadd_epi32(v[0], v[1]);
    let h23 = _mm256_hadd_epi32(v[2], v[3]);
    let h45 = _mm256_hadd_epi32(v[4], v[5]);
    let h67 = _mm256_hadd_epi32(v[6], v[7]);
    let (a, b) = (_mm256_hadd_epi32(h01, h23), _mm256_hadd_epi32(h45, h67));
    _mm256_add_epi32(_mm256_permute2x128_si256(a, b, 0x20), _mm256_permute2x128_si256(a, b, 0x31))
}

/// The eight 6-bit scales and eight 6-bit mins of a q4_k / q5_k block as bytes (`scale_min_k4`
/// for j = 0..8, the bit shuffle ggml's AVX2 kernel does on four u32 words).
#[inline]
pub(super) fn scales_mins_k4(q: &[u8; 12]) -> ([u8; 8], [u8; 8]) {
    const M1: u32 = 0x3f3f_3f3f;
    const M2: u32 = 0x0f0f_0f0f;
    const M3: u32 = 0x0303_0303;
    let w = |i: usize| u32::from_le_bytes([q[4 * i], q[4 * i + 1], q[4 * i + 2], q[4 * i + 3]]);
    let (u0, u1, u2) = (w(0), w(1), w(2));
    let sc = [u0 & M1, (u2 & M2) | (((u0 >> 6) & M3) << 4)];
    let mn = [u1 & M1, ((u2 >> 4) & M2) | (((u1 >> 6) & M3) << 4)];
    let bytes = |v: [u32; 2]| {
        let (a, b) = (v[0].to_le_bytes(), v[1].to_le_bytes());
        [a[0], a[1], a[2], a[3], b[0], b[1], b[2], b[3]]
    };
    (bytes(sc), bytes(mn))
}

/// Σ over the row of (d·sc_j)·Σ q·qx·dx − dmin·m_j·Σ qx·dx, q4_k: one 32-byte load holds two
/// sub-blocks (low nibbles: j = 2p, high: 2p + 1); the eight integer sums of a block are reduced
/// into one vector (`lane_sums`), converted once and scaled by d·sc·dx in one multiply-add.
#[target_feature(enable = "avx2,fma,f16c")]
unsafe fn row_q4k(wr: &[u8], x: &Acts<'_>) -> f32 {
    // SAFETY: reached only through the AVX2 table; every load below is inside `wr` (whole
    // blocks) or `x` (256 quants, 8 scales and sums per block), as `drive` asserts.
    unsafe {
        let (mask, ones) = (_mm256_set1_epi8(0x0F), _mm256_set1_epi16(1));
        let (mut acc, mut mins) = (_mm256_setzero_ps(), _mm256_setzero_ps());
        for (i, b) in blocks::<BlockQ4K>(wr).iter().enumerate() {
            prefetch(wr, 144 * i + AHEAD);
            let (sc, mn) = scales_mins_k4(&b.scales);
            let widen = |v: [u8; 8]| _mm256_cvtepi32_ps(_mm256_cvtepu8_epi32(_mm_loadl_epi64(v.as_ptr().cast())));
            let xd = _mm256_loadu_ps(x.d.as_ptr().add(8 * i));
            let sums = _mm256_cvtepi32_ps(_mm256_loadu_si256(x.sums.as_ptr().add(8 * i).cast()));
            let mv = _mm256_mul_ps(widen(mn), _mm256_set1_ps(h(b.dmin)));
            mins = _mm256_fmadd_ps(_mm256_mul_ps(xd, sums), mv, mins);
            let mut p = [_mm256_setzero_si256(); 8];
            for (pair, chunk) in p.chunks_exact_mut(2).enumerate() {
                let raw = _mm256_loadu_si256(b.qs.as_ptr().add(32 * pair).cast());
                let q = [_mm256_and_si256(raw, mask), _mm256_and_si256(_mm256_srli_epi16(raw, 4), mask)];
                for (half, out) in chunk.iter_mut().enumerate() {
                    let xv = _mm256_loadu_si256(x.q.as_ptr().add(QK_K * i + QK * (2 * pair + half)).cast());
                    *out = _mm256_madd_epi16(_mm256_maddubs_epi16(q[half], xv), ones);
                }
            }
            let f = _mm256_mul_ps(_mm256_mul_ps(widen(sc), _mm256_set1_ps(h(b.d))), xd);
            acc = _mm256_fmadd_ps(_mm256_cvtepi32_ps(lane_sums(p)), f, acc);
        }
        hsum(acc) - hsum(mins)
    }
}

/// Σ over the row of (d·sc_j)·Σ q·qx·dx − dmin·m_j·Σ qx·dx, q5_k: one sub-block at a time,
/// its sum converted and scaled on its own.
#[target_feature(enable = "avx2,fma,f16c")]
unsafe fn row_qk<B: KBlock + Block>(wr: &[u8], x: &Acts<'_>) -> f32 {
    // SAFETY: reached only through the AVX2 table; every load below is inside `wr` (whole
    // blocks) or `x` (256 quants, 8 scales and sums per block), as `drive` asserts.
    unsafe {
        let (mask, bit) = (_mm256_set1_epi8(0x0F), _mm256_set1_epi8(0x01));
        let ones = _mm256_set1_epi16(1);
        let (mut acc, mut mins) = (_mm256_setzero_ps(), _mm256_setzero_ps());
        for (i, b) in blocks::<B>(wr).iter().enumerate() {
            let (d, dmin, scales) = b.head();
            let (d, dmin) = (h(d), h(dmin));
            let (mut sc, mut m) = ([0f32; 8], [0f32; 8]);
            for (j, (scj, mj)) in sc.iter_mut().zip(m.iter_mut()).enumerate() {
                let (s, mn) = scale_min_k4(j, scales);
                (*scj, *mj) = (d * f32::from(s), f32::from(mn));
            }
            let xd = _mm256_loadu_ps(x.d.as_ptr().add(8 * i));
            let sums = _mm256_cvtepi32_ps(_mm256_loadu_si256(x.sums.as_ptr().add(8 * i).cast()));
            let mv = _mm256_mul_ps(_mm256_loadu_ps(m.as_ptr()), _mm256_set1_ps(dmin));
            mins = _mm256_fmadd_ps(_mm256_mul_ps(xd, sums), mv, mins);
            let qh = b.qh().map(|q| _mm256_loadu_si256(q.as_ptr().cast()));
            for (j, &scj) in sc.iter().enumerate() {
                let raw = _mm256_loadu_si256(b.qs().as_ptr().add(32 * (j / 2)).cast());
                let mut q = _mm256_and_si256(_mm256_srl_epi16(raw, _mm_cvtsi32_si128(4 * (j as i32 % 2))), mask);
                if let Some(qh) = qh {
                    let hi = _mm256_and_si256(_mm256_srl_epi16(qh, _mm_cvtsi32_si128(j as i32)), bit);
                    q = _mm256_or_si256(q, _mm256_slli_epi16(hi, 4));
                }
                let xv = _mm256_loadu_si256(x.q.as_ptr().add(QK_K * i + QK * j).cast());
                let p = _mm256_madd_epi16(_mm256_maddubs_epi16(q, xv), ones);
                let s = _mm256_set1_ps(scj * *x.d.get_unchecked(8 * i + j));
                acc = _mm256_fmadd_ps(_mm256_cvtepi32_ps(p), s, acc);
            }
        }
        hsum(acc) - hsum(mins)
    }
}

/// Σ over the row of d·dx · Σ_h sc_h · Σ (q − 32)·qx, q6_k: the eight sub-blocks' integer sums
/// of a block are reduced into one vector (`lane_sums`) and scaled by d·dx in one multiply-add.
#[target_feature(enable = "avx2,fma,f16c")]
unsafe fn row_q6k(wr: &[u8], x: &Acts<'_>) -> f32 {
    // SAFETY: as in `row_q4k` (whole 210-byte blocks; 256 quants and 8 scales per block).
    unsafe {
        let (low4, low2) = (_mm256_set1_epi8(0x0F), _mm256_set1_epi8(0x03));
        let m32 = _mm256_set1_epi8(32);
        let mut acc = _mm256_setzero_ps();
        for (blk, b) in blocks::<BlockQ6K>(wr).iter().enumerate() {
            prefetch(wr, 210 * blk + AHEAD);
            let mut p = [_mm256_setzero_si256(); 8];
            for n in 0..2 {
                let qh = _mm256_loadu_si256(b.qh.as_ptr().add(32 * n).cast());
                let ql = [0, 1].map(|h| _mm256_loadu_si256(b.ql.as_ptr().add(64 * n + 32 * h).cast()));
                for i in 0..4 {
                    let lo = _mm256_and_si256(if i < 2 { ql[i] } else { _mm256_srli_epi16(ql[i - 2], 4) }, low4);
                    let hi = _mm256_and_si256(_mm256_srl_epi16(qh, _mm_cvtsi32_si128(2 * i as i32)), low2);
                    let q = _mm256_or_si256(lo, _mm256_slli_epi16(hi, 4));
                    let s = 4 * n + i;
                    let xv = _mm256_loadu_si256(x.q.as_ptr().add(QK_K * blk + QK * s).cast());
                    let pairs = _mm256_sub_epi16(_mm256_maddubs_epi16(q, xv), _mm256_maddubs_epi16(m32, xv));
                    let (k0, k1) =
                        (i16::from(b.scales[8 * n + 2 * i] as i8), i16::from(b.scales[8 * n + 2 * i + 1] as i8));
                    let kv = _mm256_setr_m128i(_mm_set1_epi16(k0), _mm_set1_epi16(k1));
                    p[s] = _mm256_madd_epi16(pairs, kv);
                }
            }
            let f = _mm256_mul_ps(_mm256_set1_ps(h(b.d)), _mm256_loadu_ps(x.d.as_ptr().add(8 * blk)));
            acc = _mm256_fmadd_ps(_mm256_cvtepi32_ps(lane_sums(p)), f, acc);
        }
        hsum(acc)
    }
}

/// See `drive`: row-major q2_k.
pub fn gemv_i8_q2k(w: Mat<'_>, rows: Range<usize>, xa: &QuantizedActs, n: usize, out: &mut [f32]) {
    drive(w, rows, xa, n, out, row_q23k::<false>)
}

/// See `drive`: row-major q3_k.
pub fn gemv_i8_q3k(w: Mat<'_>, rows: Range<usize>, xa: &QuantizedActs, n: usize, out: &mut [f32]) {
    drive(w, rows, xa, n, out, row_q23k::<true>)
}

/// q2_k (`Q3` false) or q3_k: per sub-block s = 4n + i, the 2-bit quants at bits 2i of
/// qs[32n ..] (q3_k: | hmask bit s << 2, value − 4), the scales of its two halves (q2_k's low
/// nibbles, q3_k's 6-bit values − 32) in the two register lanes; q2_k's mins (high nibbles)
/// meet the activations' half sums the same way.
#[target_feature(enable = "avx2,fma,f16c")]
unsafe fn row_q23k<const Q3: bool>(wr: &[u8], x: &Acts<'_>) -> f32 {
    // SAFETY: reached only through the AVX2 table; whole 84- / 110-byte blocks in `wr`, 256
    // quants and 8 scales per block in `x`, as `drive` asserts.
    unsafe {
        let (low2, one, four) = (_mm256_set1_epi8(0x03), _mm256_set1_epi8(0x01), _mm256_set1_epi8(4));
        let (mut acc, mut mins) = (_mm256_setzero_ps(), _mm256_setzero_ps());
        let bb = if Q3 { 110 } else { 84 };
        for blk in 0..wr.len() / bb {
            let p = &wr[blk * bb..(blk + 1) * bb];
            let (qs, d, k, m, dmin) = if Q3 {
                let b = &blocks::<BlockQ3K>(p)[0];
                let k = q3k_scales(&b.scales).map(|v| i16::from(v) - 32);
                (&b.qs, h(b.d), k, [0i16; 16], 0.0)
            } else {
                let b = &blocks::<BlockQ2K>(p)[0];
                (&b.qs, h(b.d), b.scales.map(|v| i16::from(v & 0xF)), b.scales.map(|v| i16::from(v >> 4)), h(b.dmin))
            };
            let hmask = if Q3 { Some(_mm256_loadu_si256(p.as_ptr().cast())) } else { None };
            for s in 0..8 {
                let (n, i) = (s / 4, s % 4);
                let raw = _mm256_loadu_si256(qs.as_ptr().add(32 * n).cast());
                let mut q = _mm256_and_si256(_mm256_srl_epi16(raw, _mm_cvtsi32_si128(2 * i as i32)), low2);
                let xv = _mm256_loadu_si256(x.q.as_ptr().add(QK_K * blk + QK * s).cast());
                let xd = *x.d.get_unchecked(8 * blk + s);
                let mut pairs = _mm256_maddubs_epi16(q, xv);
                if let Some(hm) = hmask {
                    let hb = _mm256_and_si256(_mm256_srl_epi16(hm, _mm_cvtsi32_si128(s as i32)), one);
                    q = _mm256_or_si256(q, _mm256_slli_epi16(hb, 2));
                    pairs = _mm256_sub_epi16(_mm256_maddubs_epi16(q, xv), _mm256_maddubs_epi16(four, xv));
                } else {
                    let mv = _mm256_setr_m128i(_mm_set1_epi16(m[2 * s]), _mm_set1_epi16(m[2 * s + 1]));
                    let pm = _mm256_madd_epi16(_mm256_maddubs_epi16(one, xv), mv);
                    mins = _mm256_fmadd_ps(_mm256_cvtepi32_ps(pm), _mm256_set1_ps(dmin * xd), mins);
                }
                let kv = _mm256_setr_m128i(_mm_set1_epi16(k[2 * s]), _mm_set1_epi16(k[2 * s + 1]));
                let pk = _mm256_madd_epi16(pairs, kv);
                acc = _mm256_fmadd_ps(_mm256_cvtepi32_ps(pk), _mm256_set1_ps(d * xd), acc);
            }
        }
        hsum(acc) - hsum(mins)
    }
}

#[cfg(test)]
mod tests {
    use super::scales_mins_k4;
    use crate::format::ggml::scale_min_k4;

    #[test]
    fn word_shuffled_scales_are_scale_min_k4() {
        let mut state = 0x9E37_79B9_7F4A_7C15u64;
        for _ in 0..20_000 {
            let mut q = [0u8; 12];
            for b in &mut q {
                state ^= state << 13;
                state ^= state >> 7;
                state ^= state << 17;
                *b = state as u8;
            }
            let (sc, mn) = scales_mins_k4(&q);
            for j in 0..8 {
                assert_eq!((sc[j], mn[j]), scale_min_k4(j, &q), "{q:?} j {j}");
            }
        }
    }
}
