//! AVX2 widening (dequantisation to f32) of GGUF's block types — q4_k, q6_k, q5_k, q3_k, q2_k,
//! iq4_xs, iq4_nl, q5_0, q5_1, q4_0, q4_1, and the interleaved q4_kr8 / q6_kr8 / iq4_xsr8 / iq4_nlr8 — for
//! the float-activation products: the prefill GEMM widens weight panels with these, and the
//! float-activation matrix-vector kernel (`gemv`: `COLIBRI_QUANT_ACT=float`, MLA's per-head
//! products) widens up to 256 columns of eight rows at a time, then takes their FMA dots.
//!
//! Reference: `Block::dequantize` (ggml's `dequantize_row_*`), bit for bit. Each 32-element
//! sub-block is brought to the reference's integer form (`Unpacked`: 32 signed, offset-free
//! quants in one register; the f32 scale d·k and min term dm·m of each half of 16, computed in
//! scalar as the reference computes them) and `emit` converts the quants to f32 and writes
//! (d·k)·q (+ dm·m): the same two roundings, unfused, so the values are the reference's.

use super::super::mat::Mat;
use super::super::table::WidenFn;
use super::gemv::add_dots_f32;
use super::kquant::scales_mins_k4;
use super::legacy::{fifth_bits, iq4_levels, nibbles};
use crate::format::ggml::{
    blocks, bytes_of, h, iq4xs_scale, q3k_scales, Block, BlockIq4Nl, BlockIq4Xs, BlockQ2K, BlockQ3K, BlockQ4K,
    BlockQ4_0, BlockQ4_1, BlockQ5K, BlockQ5_0, BlockQ5_1, BlockQ6K,
};
use crate::format::kr8::{row_block, Interleave};
use core::arch::x86_64::*;
use std::ops::Range;

/// Writes the values of whole blocks (`bytes`) to `out` (their element count).
type RunFn = unsafe fn(bytes: &[u8], out: &mut [f32]);

/// A block type's run kernel.
pub(super) trait Widen: Block {
    const RUN: RunFn;
}

/// Elements [k0, k0 + kc) of rows `rows` of `w` as f32 into out ([rows.len(), kc]; k0 and kc
/// whole blocks).
pub fn widen<B: Widen>(w: Mat<'_>, rows: Range<usize>, k0: usize, out: &mut [f32]) {
    let (bb, cols) = (std::mem::size_of::<B>(), w.cols());
    let kc = out.len() / rows.len().max(1);
    assert!(k0.is_multiple_of(B::QK) && kc.is_multiple_of(B::QK) && k0 + kc <= cols && rows.end <= w.rows());
    let row_bytes = cols / B::QK * bb;
    let (first, n) = (k0 / B::QK * bb, kc / B::QK * bb);
    for (r, o) in rows.zip(out.chunks_exact_mut(kc.max(1))) {
        let at = r * row_bytes + first;
        // SAFETY: the AVX2 table is only reachable on AVX2+FMA+F16C CPUs; the bytes are whole
        // blocks of row r (asserted above) and `o` holds their kc elements.
        unsafe { B::RUN(&w.bytes()[at..at + n], o) };
    }
}

/// The same for an interleaved K-quant matrix (q4_kr8 / q6_kr8 / iq4_xsr8 / iq4_nlr8, `format::kr8`): each block taken
/// out of its unit as ggml stores it, then widened as a row-major one.
pub fn widen_kr8<B: Widen + Interleave>(w: Mat<'_>, rows: Range<usize>, k0: usize, out: &mut [f32]) {
    let (cols, nb) = (w.cols(), w.cols() / B::QK);
    let kc = out.len() / rows.len().max(1);
    assert!(k0.is_multiple_of(B::QK) && kc.is_multiple_of(B::QK) && k0 + kc <= cols && rows.end <= w.rows());
    for (r, o) in rows.zip(out.chunks_exact_mut(kc.max(1))) {
        for (b, ob) in (k0 / B::QK..(k0 + kc) / B::QK).zip(o.chunks_exact_mut(B::QK)) {
            let blk = row_block::<B>(w.bytes(), nb, r, b);
            // SAFETY: the AVX2 table is only reachable on AVX2+FMA+F16C CPUs; `blk` is one whole
            // block and `ob` holds its QK elements.
            unsafe { B::RUN(bytes_of(&blk), ob) };
        }
    }
}

/// Columns widened per step of `gemv` (a multiple of every block length).
const CHUNK: usize = 256;

/// out[t·rows.len() + i] = w[rows.start + i] · x[t] (see `table::GemvFn`) for a row-major GGUF
/// block matrix: `by_widening` with `widen`.
pub fn gemv<B: Widen>(w: Mat<'_>, rows: Range<usize>, x: &[f32], n: usize, out: &mut [f32]) {
    by_widening(widen::<B>, B::QK, w, rows, x, n, out)
}

/// The same for an interleaved K-quant matrix, with `widen_kr8`.
pub fn gemv_kr8<B: Widen + Interleave>(w: Mat<'_>, rows: Range<usize>, x: &[f32], n: usize, out: &mut [f32]) {
    by_widening(widen_kr8::<B>, B::QK, w, rows, x, n, out)
}

/// The float-activation matrix-vector product by widening (blocks of `qk` columns): ROWS rows at
/// a time widened CHUNK columns at a time (one widening call per ROWS rows: short rows, such as
/// MLA's per-head W_UK with 128 columns, spent most of their time in per-row calls), each
/// chunk's FMA dots with every activation row added in, in column order.
#[inline(always)]
fn by_widening(widen: WidenFn, qk: usize, w: Mat<'_>, rows: Range<usize>, x: &[f32], n: usize, out: &mut [f32]) {
    const ROWS: usize = 8;
    let (len, cols) = (rows.len(), w.cols());
    assert!(x.len() >= n * cols && out.len() >= n * len && cols.is_multiple_of(qk));
    let mut buf = [0f32; ROWS * CHUNK];
    out[..n * len].fill(0.0);
    for r0 in rows.clone().step_by(ROWS) {
        let (rr, i) = (ROWS.min(rows.end - r0), r0 - rows.start);
        for k0 in (0..cols).step_by(CHUNK) {
            let kc = CHUNK.min(cols - k0);
            widen(w, r0..r0 + rr, k0, &mut buf[..rr * kc]);
            for t in 0..n {
                add_dots_f32(&buf[..rr * kc], kc, &x[t * cols + k0..][..kc], &mut out[t * len + i..][..rr]);
            }
        }
    }
}

/// out[..32] = (sc[g / 2] · q[8g .. 8g + 8]) (+ mn[g / 2]) for the four groups g of eight of the
/// 32 signed quants in `q`: halves of 16 take their own scale and min term.
#[inline]
#[target_feature(enable = "avx2,fma,f16c")]
unsafe fn emit(q: __m256i, sc: [f32; 2], mn: Option<[f32; 2]>, out: *mut f32) {
    // SAFETY: the caller passes 32 writable floats at `out`.
    unsafe {
        let (lo, hi) = (_mm256_castsi256_si128(q), _mm256_extracti128_si256::<1>(q));
        for (g, part) in [lo, _mm_srli_si128::<8>(lo), hi, _mm_srli_si128::<8>(hi)].into_iter().enumerate() {
            let f = _mm256_cvtepi32_ps(_mm256_cvtepi8_epi32(part));
            let mut v = _mm256_mul_ps(_mm256_set1_ps(sc[g / 2]), f);
            if let Some(m) = mn {
                v = _mm256_add_ps(v, _mm256_set1_ps(m[g / 2]));
            }
            _mm256_storeu_ps(out.add(8 * g), v);
        }
    }
}

/// The 32 bytes at `p` shifted right by `shift` bits (per byte: 16-bit shifts, then `mask`).
#[inline]
#[target_feature(enable = "avx2,fma,f16c")]
unsafe fn bits(p: *const u8, shift: i32, mask: i8) -> __m256i {
    // SAFETY: the caller passes 32 readable bytes.
    unsafe {
        let v = _mm256_loadu_si256(p.cast());
        _mm256_and_si256(_mm256_srl_epi16(v, _mm_cvtsi32_si128(shift)), _mm256_set1_epi8(mask))
    }
}

/// Runs `each(block, out)` over the whole blocks of `bytes`, QK outputs per block.
#[inline(always)]
fn for_blocks<B: Block>(bytes: &[u8], out: &mut [f32], mut each: impl FnMut(&B, *mut f32)) {
    for (b, o) in blocks::<B>(bytes).iter().zip(out.chunks_exact_mut(B::QK)) {
        each(b, o.as_mut_ptr());
    }
}

#[target_feature(enable = "avx2,fma,f16c")]
unsafe fn run_q4k(bytes: &[u8], out: &mut [f32]) {
    // SAFETY: reached through the AVX2 table only; loads inside block b, stores in its outputs.
    for_blocks::<BlockQ4K>(bytes, out, |b, o| unsafe {
        let (d, dm) = (h(b.d), -h(b.dmin));
        let (sc, mn) = scales_mins_k4(&b.scales);
        for j in 0..8 {
            let q = bits(b.qs.as_ptr().add(32 * (j / 2)), 4 * (j as i32 % 2), 0x0F);
            let (s, m) = (d * f32::from(sc[j]), dm * f32::from(mn[j]));
            emit(q, [s, s], Some([m, m]), o.add(32 * j));
        }
    })
}

#[target_feature(enable = "avx2,fma,f16c")]
unsafe fn run_q5k(bytes: &[u8], out: &mut [f32]) {
    // SAFETY: reached through the AVX2 table only; loads inside block b, stores in its outputs.
    for_blocks::<BlockQ5K>(bytes, out, |b, o| unsafe {
        let (d, dm) = (h(b.d), -h(b.dmin));
        let (sc, mn) = scales_mins_k4(&b.scales);
        for j in 0..8 {
            let low = bits(b.qs.as_ptr().add(32 * (j / 2)), 4 * (j as i32 % 2), 0x0F);
            let fifth = _mm256_slli_epi16::<4>(bits(b.qh.as_ptr(), j as i32, 0x01));
            let (s, m) = (d * f32::from(sc[j]), dm * f32::from(mn[j]));
            emit(_mm256_or_si256(low, fifth), [s, s], Some([m, m]), o.add(32 * j));
        }
    })
}

#[target_feature(enable = "avx2,fma,f16c")]
unsafe fn run_q6k(bytes: &[u8], out: &mut [f32]) {
    // SAFETY: reached through the AVX2 table only; loads inside block b, stores in its outputs.
    for_blocks::<BlockQ6K>(bytes, out, |b, o| unsafe {
        let d = h(b.d);
        for s in 0..8 {
            let (n, i) = (s / 4, s % 4);
            let low = bits(b.ql.as_ptr().add(64 * n + 32 * (i % 2)), 4 * (i as i32 / 2), 0x0F);
            let high = _mm256_slli_epi16::<4>(bits(b.qh.as_ptr().add(32 * n), 2 * i as i32, 0x03));
            let q = _mm256_sub_epi8(_mm256_or_si256(low, high), _mm256_set1_epi8(32));
            let k = |x: u8| d * f32::from(x as i8);
            emit(q, [k(b.scales[8 * n + 2 * i]), k(b.scales[8 * n + 2 * i + 1])], None, o.add(32 * s));
        }
    })
}

#[target_feature(enable = "avx2,fma,f16c")]
unsafe fn run_q3k(bytes: &[u8], out: &mut [f32]) {
    // SAFETY: reached through the AVX2 table only; loads inside block b, stores in its outputs.
    for_blocks::<BlockQ3K>(bytes, out, |b, o| unsafe {
        let (d, sc) = (h(b.d), q3k_scales(&b.scales));
        for s in 0..8 {
            let low = bits(b.qs.as_ptr().add(32 * (s / 4)), 2 * (s as i32 % 4), 0x03);
            let third = _mm256_slli_epi16::<2>(bits(b.hmask.as_ptr(), s as i32, 0x01));
            let q = _mm256_sub_epi8(_mm256_or_si256(low, third), _mm256_set1_epi8(4));
            let k = |x: i8| d * (i32::from(x) - 32) as f32;
            emit(q, [k(sc[2 * s]), k(sc[2 * s + 1])], None, o.add(32 * s));
        }
    })
}

#[target_feature(enable = "avx2,fma,f16c")]
unsafe fn run_q2k(bytes: &[u8], out: &mut [f32]) {
    // SAFETY: reached through the AVX2 table only; loads inside block b, stores in its outputs.
    for_blocks::<BlockQ2K>(bytes, out, |b, o| unsafe {
        let (d, dm) = (h(b.d), -h(b.dmin));
        for s in 0..8 {
            let q = bits(b.qs.as_ptr().add(32 * (s / 4)), 2 * (s as i32 % 4), 0x03);
            let (s0, s1) = (b.scales[2 * s], b.scales[2 * s + 1]);
            let (k, m) = (|x: u8| d * f32::from(x & 0xF), |x: u8| dm * f32::from(x >> 4));
            emit(q, [k(s0), k(s1)], Some([m(s0), m(s1)]), o.add(32 * s));
        }
    })
}

#[target_feature(enable = "avx2,fma,f16c")]
unsafe fn run_iq4xs(bytes: &[u8], out: &mut [f32]) {
    // SAFETY: reached through the AVX2 table only; loads inside block b, stores in its outputs.
    for_blocks::<BlockIq4Xs>(bytes, out, |b, o| unsafe {
        let d = h(b.d);
        for ib in 0..8 {
            let s = d * (iq4xs_scale(b, ib) - 32) as f32;
            emit(iq4_levels(b.qs.as_ptr().add(16 * ib)), [s, s], None, o.add(32 * ib));
        }
    })
}

/// The 32-element types: quants from the 16 nibble bytes at `qs` (iq4_nl: their levels),
/// q5's fifth bits from the 4 bytes at `qh`, less `offset`; min term `m` for q4_1 / q5_1.
#[inline]
#[target_feature(enable = "avx2,fma,f16c")]
unsafe fn legacy(d: [u8; 2], m: Option<[u8; 2]>, qs: *const u8, qh: Option<*const u8>, offset: i8, o: *mut f32) {
    // SAFETY: the caller passes a block's 16 nibble bytes, its 4 mask bytes and 32 outputs.
    unsafe {
        let mut q = nibbles(qs);
        if let Some(qh) = qh {
            q = _mm256_or_si256(q, fifth_bits(qh));
        }
        let q = _mm256_sub_epi8(q, _mm256_set1_epi8(offset));
        let d = h(d);
        // k = m = 1: the reference's d·1 and dm·1.
        emit(q, [d, d], m.map(|m| [h(m), h(m)]), o);
    }
}

#[target_feature(enable = "avx2,fma,f16c")]
unsafe fn run_q4_0(bytes: &[u8], out: &mut [f32]) {
    // SAFETY: reached through the AVX2 table only; loads inside block b, stores in its outputs.
    for_blocks::<BlockQ4_0>(bytes, out, |b, o| unsafe { legacy(b.d, None, b.qs.as_ptr(), None, 8, o) })
}

#[target_feature(enable = "avx2,fma,f16c")]
unsafe fn run_q4_1(bytes: &[u8], out: &mut [f32]) {
    // SAFETY: reached through the AVX2 table only; loads inside block b, stores in its outputs.
    for_blocks::<BlockQ4_1>(bytes, out, |b, o| unsafe { legacy(b.d, Some(b.m), b.qs.as_ptr(), None, 0, o) })
}

#[target_feature(enable = "avx2,fma,f16c")]
unsafe fn run_q5_0(bytes: &[u8], out: &mut [f32]) {
    // SAFETY: reached through the AVX2 table only; loads inside block b, stores in its outputs.
    for_blocks::<BlockQ5_0>(bytes, out, |b, o| unsafe { legacy(b.d, None, b.qs.as_ptr(), Some(b.qh.as_ptr()), 16, o) })
}

#[target_feature(enable = "avx2,fma,f16c")]
unsafe fn run_q5_1(bytes: &[u8], out: &mut [f32]) {
    // SAFETY: reached through the AVX2 table only; loads inside block b, stores in its outputs.
    for_blocks::<BlockQ5_1>(bytes, out, |b, o| unsafe {
        legacy(b.d, Some(b.m), b.qs.as_ptr(), Some(b.qh.as_ptr()), 0, o)
    })
}

#[target_feature(enable = "avx2,fma,f16c")]
unsafe fn run_iq4nl(bytes: &[u8], out: &mut [f32]) {
    // SAFETY: reached through the AVX2 table only; loads inside block b, stores in its outputs.
    for_blocks::<BlockIq4Nl>(bytes, out, |b, o| unsafe {
        let d = h(b.d);
        emit(iq4_levels(b.qs.as_ptr()), [d, d], None, o)
    })
}

macro_rules! widen_impl {
    ($($t:ty => $run:ident),* $(,)?) => {
        $(impl Widen for $t {
            const RUN: RunFn = $run;
        })*
    };
}

widen_impl!(
    BlockQ4K => run_q4k, BlockQ5K => run_q5k, BlockQ6K => run_q6k, BlockQ3K => run_q3k, BlockQ2K => run_q2k,
    BlockIq4Xs => run_iq4xs, BlockIq4Nl => run_iq4nl, BlockQ4_0 => run_q4_0, BlockQ4_1 => run_q4_1,
    BlockQ5_0 => run_q5_0, BlockQ5_1 => run_q5_1,
);

#[cfg(test)]
mod tests;
