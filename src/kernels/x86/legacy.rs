//! AVX2 int8-activation matrix-vector kernels of GGUF's 32-element block types q8_0, q4_0,
//! q4_1, q5_0, q5_1 and iq4_nl, and of iq4_xs (iq4_nl's levels in super-blocks of 8 with 6-bit
//! scales) (references: `actq::dot_q8_0_i8`, `actq::dot_ggml_i8`). Per block, against the
//! activation block of the same columns: signed quants (q8_0's, and the iq4 levels looked up by
//! `vpshufb`) take their sign into the activations (`vpsignb`) for one `vpmaddubsw`; unsigned
//! quants (nibbles, with q5_0 / q5_1's fifth bit spread from its 32-bit mask) meet the
//! activations directly, q4_0 / q5_0's offset (8, 16) subtracted in i16, q4_1 / q5_1's min added
//! from the activation block sums. One `vpmaddwd` to i32 lanes, converted once and scaled by
//! d·dx: the integer block sums are the reference's, only the float additions are reordered.

use super::super::actq::QuantizedActs;
use super::super::mat::Mat;
use super::gemv::hsum;
use super::kquant::{drive, Acts};
use crate::format::blocks::QK;
use crate::format::ggml::{blocks, h, iq4xs_scale, BlockIq4Xs, KVALUES_IQ4NL};
use core::arch::x86_64::*;
use std::ops::Range;

/// The dtypes of this file, as their `KIND` parameter.
pub const Q8_0: u8 = 0;
pub const Q4_0: u8 = 1;
pub const Q5_0: u8 = 2;
pub const IQ4_NL: u8 = 3;
pub const Q4_1: u8 = 4;
pub const Q5_1: u8 = 5;

/// See `kquant::drive`: row-major q8_0, q4_0, q5_0, iq4_nl, q4_1 or q5_1 (`KIND`).
pub fn gemv_i8<const KIND: u8>(w: Mat<'_>, rows: Range<usize>, xa: &QuantizedActs, n: usize, out: &mut [f32]) {
    drive(w, rows, xa, n, out, row::<KIND>)
}

/// The 32 nibbles of 16 bytes at `p` in element order (low nibbles, then high ones).
#[inline]
#[target_feature(enable = "avx2,fma,f16c")]
pub(super) unsafe fn nibbles(p: *const u8) -> __m256i {
    // SAFETY: the caller passes 16 readable bytes (AVX2 reached through its table only).
    unsafe {
        let raw = _mm256_broadcastsi128_si256(_mm_loadu_si128(p.cast()));
        let shifted = _mm256_srlv_epi32(raw, _mm256_setr_epi32(0, 0, 0, 0, 4, 4, 4, 4));
        _mm256_and_si256(shifted, _mm256_set1_epi8(15))
    }
}

/// The iq4 levels of 16 bytes of nibbles at `p`, in element order.
#[inline]
#[target_feature(enable = "avx2,fma,f16c")]
pub(super) unsafe fn iq4_levels(p: *const u8) -> __m256i {
    // SAFETY: the caller passes 16 readable bytes (AVX2 reached through its table only).
    unsafe {
        let table = _mm256_broadcastsi128_si256(_mm_loadu_si128(KVALUES_IQ4NL.as_ptr().cast()));
        _mm256_shuffle_epi8(table, nibbles(p))
    }
}

/// Pairs of q·x (i16) of signed quants q in [−127, 127] with activations x.
#[inline]
#[target_feature(enable = "avx2,fma,f16c")]
unsafe fn signed_pairs(q: __m256i, x: __m256i) -> __m256i {
    _mm256_maddubs_epi16(_mm256_sign_epi8(q, q), _mm256_sign_epi8(x, q))
}

/// See `kquant::drive`: row-major iq4_xs.
pub fn gemv_i8_iq4xs(w: Mat<'_>, rows: Range<usize>, xa: &QuantizedActs, n: usize, out: &mut [f32]) {
    drive(w, rows, xa, n, out, row_iq4xs)
}

/// Σ over the row of d·(ls − 32)·dx · Σ K[q]·qx per 32-element sub-block.
#[target_feature(enable = "avx2,fma,f16c")]
unsafe fn row_iq4xs(wr: &[u8], x: &Acts<'_>) -> f32 {
    // SAFETY: reached only through the AVX2 table; whole 136-byte blocks in `wr`, 256 quants
    // and 8 scales per block in `x`, as `drive` asserts.
    unsafe {
        let ones = _mm256_set1_epi16(1);
        let mut acc = _mm256_setzero_ps();
        for (i, b) in blocks::<BlockIq4Xs>(wr).iter().enumerate() {
            let d = h(b.d);
            for ib in 0..8 {
                let q = iq4_levels(b.qs.as_ptr().add(16 * ib));
                let xv = _mm256_loadu_si256(x.q.as_ptr().add(QK * (8 * i + ib)).cast());
                let p = _mm256_madd_epi16(signed_pairs(q, xv), ones);
                let f = d * (iq4xs_scale(b, ib) - 32) as f32 * *x.d.get_unchecked(8 * i + ib);
                acc = _mm256_fmadd_ps(_mm256_cvtepi32_ps(p), _mm256_set1_ps(f), acc);
            }
        }
        hsum(acc)
    }
}

/// 0x10 in byte j where bit j of the 32-bit mask at `p` is set.
#[inline]
#[target_feature(enable = "avx2,fma,f16c")]
pub(super) unsafe fn fifth_bits(p: *const u8) -> __m256i {
    // SAFETY: the caller passes 4 readable bytes (AVX2 reached through its table only).
    unsafe {
        let bits = _mm256_set1_epi32(p.cast::<i32>().read_unaligned());
        // Byte j takes mask byte j / 8, then keeps its bit j % 8.
        let spread = _mm256_shuffle_epi8(
            bits,
            _mm256_setr_epi8(
                0, 0, 0, 0, 0, 0, 0, 0, 1, 1, 1, 1, 1, 1, 1, 1, 2, 2, 2, 2, 2, 2, 2, 2, 3, 3, 3, 3, 3, 3, 3, 3,
            ),
        );
        let probe = _mm256_set1_epi64x(0x8040_2010_0804_0201u64 as i64);
        let set = _mm256_cmpeq_epi8(_mm256_and_si256(spread, probe), probe);
        _mm256_and_si256(set, _mm256_set1_epi8(0x10))
    }
}

/// Σ over the row's blocks of d·dx·Σ (q − offset)·qx.
#[target_feature(enable = "avx2,fma,f16c")]
unsafe fn row<const KIND: u8>(wr: &[u8], x: &Acts<'_>) -> f32 {
    let bb = match KIND {
        Q8_0 => 2 + QK,
        Q4_0 | IQ4_NL => 2 + QK / 2,
        Q4_1 => 4 + QK / 2,
        Q5_1 => 8 + QK / 2,
        _ => 6 + QK / 2,
    };
    // SAFETY: reached only through the AVX2 table; block b's bb bytes are inside `wr` (whole
    // blocks) and its 32 activation quants and scale inside `x`, as `drive` asserts.
    unsafe {
        let ones = _mm256_set1_epi16(1);
        let mut acc = _mm256_setzero_ps();
        // q4_1 / q5_1: Σ_b m·dx·Σ qx, from the activation block sums.
        let mut mins = 0f32;
        for b in 0..wr.len() / bb {
            let p = wr.as_ptr().add(b * bb);
            let d = f32::from(half::f16::from_bits(u16::from_le_bytes([*p, *p.add(1)])));
            let xv = _mm256_loadu_si256(x.q.as_ptr().add(QK * b).cast());
            let pairs = match KIND {
                Q8_0 => signed_pairs(_mm256_loadu_si256(p.add(2).cast()), xv),
                IQ4_NL => signed_pairs(iq4_levels(p.add(2)), xv),
                Q4_1 | Q5_1 => {
                    let m = f32::from(half::f16::from_bits(u16::from_le_bytes([*p.add(2), *p.add(3)])));
                    mins += m * *x.d.get_unchecked(b) * *x.sums.get_unchecked(b) as f32;
                    let q = if KIND == Q4_1 {
                        nibbles(p.add(4))
                    } else {
                        _mm256_or_si256(nibbles(p.add(8)), fifth_bits(p.add(4)))
                    };
                    _mm256_maddubs_epi16(q, xv)
                }
                Q4_0 => {
                    let off = _mm256_maddubs_epi16(_mm256_set1_epi8(8), xv);
                    _mm256_sub_epi16(_mm256_maddubs_epi16(nibbles(p.add(2)), xv), off)
                }
                _ => {
                    let q = _mm256_or_si256(nibbles(p.add(6)), fifth_bits(p.add(2)));
                    let off = _mm256_maddubs_epi16(_mm256_set1_epi8(16), xv);
                    _mm256_sub_epi16(_mm256_maddubs_epi16(q, xv), off)
                }
            };
            let s = _mm256_madd_epi16(pairs, ones);
            acc = _mm256_fmadd_ps(_mm256_cvtepi32_ps(s), _mm256_set1_ps(d * *x.d.get_unchecked(b)), acc);
        }
        hsum(acc) + mins
    }
}
