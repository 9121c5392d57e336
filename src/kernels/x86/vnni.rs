//! AVX-512 VNNI int8 kernels for the 8-row interleaved block matrices (q8r8 / q4r8): the same
//! units, broadcasts and scaling as the AVX2 kernels of `qgroup`, with one `vpdpbusd`
//! (4 u8 × i8 products summed into each i32 lane) where AVX2 needs `vpmaddubsw` + `vpmaddwd`
//! (+ the sign moves of q8). The 4-byte chunks of the interleaved layout are exactly what one
//! `vpdpbusd` lane consumes. 256-bit EVEX forms (AVX512VL): on Zen 4, 512-bit integer ops run
//! as two 256-bit halves, so the wider registers would add shuffles without adding throughput.
//!
//! The integer block sums equal the AVX2 kernels' (and the reference's) exactly, and they are
//! scaled and summed in the same float operations: results are bit-identical to the AVX2 path.
//!
//! * W4A8: per chunk and activation row, two `vpdpbusd` (low nibbles × elements 4c.., high
//!   nibbles × elements 16 + 4c..); the offset 8·Σqx is subtracted per block, as in AVX2.
//! * W8A8: the signed weights are made unsigned once per chunk (w + 128 = w ⊕ 0x80, shared by
//!   every activation row), one `vpdpbusd` per activation row, and 128·Σqx subtracted per block
//!   (Σ (w + 128)·x = Σ w·x + 128·Σ x, exact in i32).

use super::super::actq::QuantizedActs;
use super::super::mat::Mat;
use super::qgroup::{bcast4, gemv_i8_with, prefetch_unit, store, Acts, GroupI8, Grouped};
use crate::format::blocks::{CHUNK, GROUP_ROWS, QK};
use core::arch::x86_64::*;
use std::ops::Range;

/// The VNNI group kernels: eight activation rows per pass (AVX-512 has 32 vector registers).
pub(super) struct Vnni;

impl GroupI8 for Vnni {
    const MAX_T: usize = 8;

    #[target_feature(enable = "avx512f,avx512bw,avx512vl,avx512vnni,avx2,fma,f16c")]
    unsafe fn rows(g: Grouped, grp: usize, x: &[Acts], out: &mut [[f32; GROUP_ROWS]]) {
        // SAFETY: the caller's contract (see the trait).
        unsafe {
            let a = |k: usize| x[k.min(x.len() - 1)];
            match (g.q4, x.len()) {
                (true, 8) => store(q4::<8>(g, grp, &std::array::from_fn(a)), out),
                (true, 4) => store(q4::<4>(g, grp, &std::array::from_fn(a)), out),
                (true, 2) => store(q4::<2>(g, grp, &std::array::from_fn(a)), out),
                (true, _) => store(q4::<1>(g, grp, &std::array::from_fn(a)), out),
                (false, 8) => store(q8::<8>(g, grp, &std::array::from_fn(a)), out),
                (false, 4) => store(q8::<4>(g, grp, &std::array::from_fn(a)), out),
                (false, 2) => store(q8::<2>(g, grp, &std::array::from_fn(a)), out),
                (false, _) => store(q8::<1>(g, grp, &std::array::from_fn(a)), out),
            }
        }
    }
}

/// Lane j of result t = row 8·grp + j · activation row t, W4A8, for T activation rows.
#[target_feature(enable = "avx512f,avx512bw,avx512vl,avx512vnni,avx2,fma,f16c")]
unsafe fn q4<const T: usize>(g: Grouped, grp: usize, x: &[Acts; T]) -> [__m256; T] {
    // SAFETY: the caller's contract (see the trait): units and activation blocks in bounds.
    unsafe {
        let m = _mm256_set1_epi8(15);
        let mut acc = [_mm256_setzero_ps(); T];
        for b in 0..g.nb {
            let u = g.unit(grp, b);
            prefetch_unit(g, u);
            let mut s = [_mm256_setzero_si256(); T];
            for c in 0..4 {
                // Bytes 4c..4c+4 of each row: elements 4c.. low, 16+4c.. high.
                let w = _mm256_loadu_si256(u.add(c * 32).cast());
                let (lo, hi) = (_mm256_and_si256(w, m), _mm256_and_si256(_mm256_srli_epi16(w, 4), m));
                for t in 0..T {
                    let xb = x[t].q.add(b * QK);
                    s[t] = _mm256_dpbusd_epi32(s[t], lo, bcast4(xb.add(c * CHUNK)));
                    s[t] = _mm256_dpbusd_epi32(s[t], hi, bcast4(xb.add(16 + c * CHUNK)));
                }
            }
            let d = _mm256_cvtph_ps(_mm_loadu_si128(g.scales(grp, b).cast()));
            for t in 0..T {
                let si = _mm256_sub_epi32(s[t], _mm256_set1_epi32(8 * *x[t].sums.add(b)));
                let dx = _mm256_mul_ps(d, _mm256_set1_ps(*x[t].d.add(b)));
                acc[t] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(si), dx, acc[t]);
            }
        }
        acc
    }
}

/// Lane j of result t = row 8·grp + j · activation row t, W8A8, for T activation rows.
#[target_feature(enable = "avx512f,avx512bw,avx512vl,avx512vnni,avx2,fma,f16c")]
unsafe fn q8<const T: usize>(g: Grouped, grp: usize, x: &[Acts; T]) -> [__m256; T] {
    // SAFETY: the caller's contract (see the trait): units and activation blocks in bounds.
    unsafe {
        let flip = _mm256_set1_epi8(-128);
        let mut acc = [_mm256_setzero_ps(); T];
        for b in 0..g.nb {
            let u = g.unit(grp, b);
            prefetch_unit(g, u);
            let mut s = [_mm256_setzero_si256(); T];
            for c in 0..8 {
                // w + 128 as unsigned bytes (−128 ↦ 0 … 127 ↦ 255).
                let wu = _mm256_xor_si256(_mm256_loadu_si256(u.add(c * 32).cast()), flip);
                for t in 0..T {
                    s[t] = _mm256_dpbusd_epi32(s[t], wu, bcast4(x[t].q.add(b * QK + c * CHUNK)));
                }
            }
            let d = _mm256_cvtph_ps(_mm_loadu_si128(g.scales(grp, b).cast()));
            for t in 0..T {
                let si = _mm256_sub_epi32(s[t], _mm256_set1_epi32(128 * *x[t].sums.add(b)));
                let dx = _mm256_mul_ps(d, _mm256_set1_ps(*x[t].d.add(b)));
                acc[t] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(si), dx, acc[t]);
            }
        }
        acc
    }
}

/// W8A8 / W4A8 product of interleaved `w` (see `table::GemvI8Fn`), AVX-512 VNNI.
pub fn gemv_i8(w: Mat<'_>, rows: Range<usize>, xa: &QuantizedActs, n: usize, out: &mut [f32]) {
    gemv_i8_with::<Vnni>(w, rows, xa, n, out)
}
