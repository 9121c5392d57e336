//! AVX2 pieces of the blocked GEMM (see `kernels::gemm`): the 6×16 register tile and the
//! widening of stored weight rows (any dtype, dequantising q8 / q4 / q8_0 / q4_0) to f32.

use super::super::mat::Mat;
use super::super::reference;
use super::super::table::{Operand, MR, NR};
use super::gemv::{F16, F32};
use super::qrows::BlockRows;
use crate::format::blocks::QK;
use crate::format::{tiles, DType};
use core::arch::x86_64::*;
use std::ops::Range;

/// Asserts that a tile of MR rows over kc steps stays within its operands (each B panel nr
/// columns wide) and c (cw columns).
fn check(a: &Operand<'_>, b: &[Operand<'_>], kc: usize, nr: usize, c: &[f32], ldc: usize, cw: usize) {
    assert!(
        a.holds(MR, kc) && b.iter().all(|b| b.holds(kc, nr)) && c.len() >= (MR - 1) * ldc + cw,
        "tile: A of {} (ld {}), {} B panel(s), kc {kc}, nr {nr}; c of {} (ldc {ldc}, {cw} columns)",
        a.v.len(),
        a.ld,
        b.len(),
        c.len()
    );
}

/// c[i·ldc + j] += Σ_k a[i·a.ld + k] · b[k·b.ld + j] for i < 6, j < nr (16, or 8 for a short
/// last panel): one fused multiply-add chain per output in ascending k, so a column's result
/// does not depend on the tile width, nor on where the operands' rows lie.
pub fn tile(a: Operand<'_>, b: Operand<'_>, kc: usize, c: &mut [f32], ldc: usize, nr: usize) {
    assert!(nr == NR || nr == NR / 2);
    check(&a, &[b], kc, nr, c, ldc, nr);
    let (pa, pb, pc) = (a.v.as_ptr(), b.v.as_ptr(), c.as_mut_ptr());
    // SAFETY: AVX2 table only on AVX2+FMA+F16C CPUs; bounds asserted above.
    unsafe {
        if nr == NR {
            tile_6xv::<2>(pa, a.ld, pb, b.ld, kc, pc, ldc)
        } else {
            tile_6xv::<1>(pa, a.ld, pb, b.ld, kc, pc, ldc)
        }
    }
}

/// The 6 × 8V tile: 6·V accumulators of 8 lanes.
#[target_feature(enable = "avx2,fma,f16c")]
unsafe fn tile_6xv<const V: usize>(
    a: *const f32,
    lda: usize,
    b: *const f32,
    ldb: usize,
    kc: usize,
    c: *mut f32,
    ldc: usize,
) {
    // SAFETY: reached only through the AVX2 table (the CPU has AVX2, FMA and F16C); the
    // caller passes pointers valid for the ranges this function's comment names.
    unsafe {
        let mut acc = [[_mm256_setzero_ps(); V]; MR];
        for (i, row) in acc.iter_mut().enumerate() {
            for (v, r) in row.iter_mut().enumerate() {
                *r = _mm256_loadu_ps(c.add(i * ldc + 8 * v));
            }
        }
        for k in 0..kc {
            let mut bv = [_mm256_setzero_ps(); V];
            for (v, r) in bv.iter_mut().enumerate() {
                *r = _mm256_loadu_ps(b.add(k * ldb + 8 * v));
            }
            for (i, row) in acc.iter_mut().enumerate() {
                let av = _mm256_broadcast_ss(&*a.add(i * lda + k));
                for (r, &bj) in row.iter_mut().zip(&bv) {
                    *r = _mm256_fmadd_ps(av, bj, *r);
                }
            }
        }
        for (i, row) in acc.iter().enumerate() {
            for (v, r) in row.iter().enumerate() {
                _mm256_storeu_ps(c.add(i * ldc + 8 * v), *r);
            }
        }
    }
}

/// `tile` for the AVX-512 table: the same 6 × 16 outputs, each row's 16 lanes in one zmm — the
/// same fused multiply-add chain per output in ascending k, so the same bits as `tile`; on a
/// core with 512-bit datapaths each instruction does twice a ymm's multiply-adds. A short last
/// panel (8 columns) takes `tile`'s half-width form.
pub fn tile_512(a: Operand<'_>, b: Operand<'_>, kc: usize, c: &mut [f32], ldc: usize, nr: usize) {
    if nr != NR {
        return tile(a, b, kc, c, ldc, nr);
    }
    check(&a, &[b], kc, NR, c, ldc, NR);
    // SAFETY: the AVX-512 table is chosen only on CPUs with AVX-512 F; bounds asserted above.
    unsafe { tile_6x16_zmm(a.v.as_ptr(), a.ld, b.v.as_ptr(), b.ld, kc, c.as_mut_ptr(), ldc) }
}

/// The 6 × 16 tile: 6 accumulators of 16 lanes.
#[target_feature(enable = "avx512f")]
unsafe fn tile_6x16_zmm(a: *const f32, lda: usize, b: *const f32, ldb: usize, kc: usize, c: *mut f32, ldc: usize) {
    // SAFETY: reached only through the AVX-512 table (the CPU has AVX-512 F); the caller passes
    // pointers valid for the ranges `tile_512` asserts.
    unsafe {
        let mut acc = [_mm512_setzero_ps(); MR];
        for (i, r) in acc.iter_mut().enumerate() {
            *r = _mm512_loadu_ps(c.add(i * ldc));
        }
        for k in 0..kc {
            let bv = _mm512_loadu_ps(b.add(k * ldb));
            for (i, r) in acc.iter_mut().enumerate() {
                *r = _mm512_fmadd_ps(_mm512_set1_ps(*a.add(i * lda + k)), bv, *r);
            }
        }
        for (i, r) in acc.iter().enumerate() {
            _mm512_storeu_ps(c.add(i * ldc), *r);
        }
    }
}

/// `Table::tile_pair` for the AVX-512 table: two whole panels, 6 × 32 outputs in 12 zmm
/// accumulators — each output the same fused multiply-add chain in ascending k as `tile_512`.
pub fn tile_pair_512(a: Operand<'_>, b: [Operand<'_>; 2], kc: usize, c: &mut [f32], ldc: usize) {
    check(&a, &b, kc, NR, c, ldc, 2 * NR);
    let pb = b.map(|b| (b.v.as_ptr(), b.ld));
    // SAFETY: the AVX-512 table is chosen only on CPUs with AVX-512 F; bounds asserted above.
    unsafe { tile_6x32_zmm(a.v.as_ptr(), a.ld, pb, kc, c.as_mut_ptr(), ldc) }
}

/// The 6 × 32 tile: 6 · 2 accumulators of 16 lanes.
#[target_feature(enable = "avx512f")]
unsafe fn tile_6x32_zmm(a: *const f32, lda: usize, b: [(*const f32, usize); 2], kc: usize, c: *mut f32, ldc: usize) {
    // SAFETY: reached only through the AVX-512 table (the CPU has AVX-512 F); the caller passes
    // pointers valid for the ranges `tile_pair_512` asserts.
    unsafe {
        let mut acc = [[_mm512_setzero_ps(); 2]; MR];
        for (i, row) in acc.iter_mut().enumerate() {
            for (p, r) in row.iter_mut().enumerate() {
                *r = _mm512_loadu_ps(c.add(i * ldc + p * NR));
            }
        }
        for k in 0..kc {
            let bv = b.map(|(b, ldb)| _mm512_loadu_ps(b.add(k * ldb)));
            for (i, row) in acc.iter_mut().enumerate() {
                let av = _mm512_set1_ps(*a.add(i * lda + k));
                for (r, &bp) in row.iter_mut().zip(&bv) {
                    *r = _mm512_fmadd_ps(av, bp, *r);
                }
            }
        }
        for (i, row) in acc.iter().enumerate() {
            for (p, r) in row.iter().enumerate() {
                _mm512_storeu_ps(c.add(i * ldc + p * NR), *r);
            }
        }
    }
}

/// out[i] = w[rows.start + i, k0 .. k0 + kc] as f32 for each row of a float matrix of kind K
/// (see `table::WidenFn`).
pub fn widen_float<const K: u8>(w: Mat<'_>, rows: Range<usize>, k0: usize, out: &mut [f32]) {
    let (cols, kc) = (w.cols(), out.len() / rows.len().max(1));
    assert!(k0 + kc <= cols && rows.end <= w.rows());
    for (r, o) in rows.zip(out.chunks_exact_mut(kc.max(1))) {
        let s = r * cols + k0;
        match K {
            F32 => o.copy_from_slice(&w.as_f32()[s..s + kc]),
            // SAFETY: AVX2 table only on AVX2+FMA+F16C CPUs; the slice holds the row's range.
            F16 => unsafe { widen_half::<false>(&w.as_u16()[s..s + kc], o) },
            // SAFETY: as above.
            _ => unsafe { widen_half::<true>(&w.as_u16()[s..s + kc], o) },
        }
    }
}

/// The same for a bf16r32 matrix (`format::tiles`): each row's pieces from its steps' units.
pub fn widen_bf16r32(w: Mat<'_>, rows: Range<usize>, k0: usize, out: &mut [f32]) {
    let (cols, kc, bits) = (w.cols(), out.len() / rows.len().max(1), w.as_u16());
    assert!(k0 + kc <= cols && rows.end <= w.rows() && w.dtype() == DType::Bf16R32);
    for (r, o) in rows.zip(out.chunks_exact_mut(kc.max(1))) {
        let mut c = k0;
        while c < k0 + kc {
            let end = (k0 + kc).min((c / tiles::TILE + 1) * tiles::TILE);
            let at = tiles::at(r, c, cols);
            // SAFETY: AVX2 table only on AVX2+FMA+F16C CPUs; the piece lies in the row's unit.
            unsafe { widen_half::<true>(&bits[at..at + end - c], &mut o[c - k0..end - k0]) };
            c = end;
        }
    }
}

/// The same for a row-major q8 / q8_0 (`Q4` false) or q4 / q4_0 matrix, dequantising (k0 and
/// the width whole blocks).
pub fn widen_quant<const Q4: bool>(w: Mat<'_>, rows: Range<usize>, k0: usize, out: &mut [f32]) {
    let (cols, kc) = (w.cols(), out.len() / rows.len().max(1));
    assert!(k0 + kc <= cols && rows.end <= w.rows() && k0.is_multiple_of(QK) && kc % QK == 0);
    let m = BlockRows::of::<Q4>(w);
    for (r, o) in rows.zip(out.chunks_exact_mut(kc.max(1))) {
        let (b0, b1) = ((r * cols + k0) / QK, (r * cols + k0 + kc) / QK);
        // SAFETY: AVX2 table only on AVX2+FMA+F16C CPUs; blocks b0..b1 are inside the bound
        // matrix (asserted above), `o` holds their kc elements.
        unsafe {
            if Q4 {
                widen_q4(&m, b0..b1, o)
            } else {
                widen_q8(&m, b0..b1, o)
            }
        }
    }
}

#[target_feature(enable = "avx2,fma,f16c")]
unsafe fn widen_half<const BF16: bool>(src: &[u16], out: &mut [f32]) {
    let full = src.len() - src.len() % 8;
    // SAFETY: reached only through the AVX2 table (the CPU has AVX2, FMA and F16C); the
    // caller passes pointers valid for the ranges this function's comment names.
    unsafe {
        for i in (0..full).step_by(8) {
            let h = _mm_loadu_si128(src.as_ptr().add(i).cast());
            let v = if BF16 {
                _mm256_castsi256_ps(_mm256_slli_epi32(_mm256_cvtepu16_epi32(h), 16))
            } else {
                _mm256_cvtph_ps(h)
            };
            _mm256_storeu_ps(out.as_mut_ptr().add(i), v);
        }
    }
    for i in full..src.len() {
        out[i] = if BF16 { reference::bf16_to_f32(src[i]) } else { reference::f16_to_f32(src[i]) };
    }
}

/// out = blocks `blocks` of `m` as f32 (q8: d · q).
#[target_feature(enable = "avx2,fma,f16c")]
unsafe fn widen_q8(m: &BlockRows, blocks: Range<usize>, out: &mut [f32]) {
    // SAFETY: reached only through the AVX2 table (the CPU has AVX2, FMA and F16C); the
    // caller passes blocks of the bound matrix and 32 outputs for each.
    unsafe {
        for (b, i) in blocks.enumerate() {
            let q = m.quants(i).cast::<__m128i>();
            widen_q8_block(_mm_loadu_si128(q), _mm_loadu_si128(q.add(1)), m.scale(i), out.as_mut_ptr().add(b * 32));
        }
    }
}

/// out[0..32] = d · q for one q8 block whose 32 quants are `first` then `second`.
#[inline]
#[target_feature(enable = "avx2,fma,f16c")]
pub(super) unsafe fn widen_q8_block(first: __m128i, second: __m128i, d: u16, out: *mut f32) {
    // SAFETY: reached only through the AVX2 table (the CPU has AVX2, FMA and F16C); the
    // caller passes pointers valid for the ranges this function's comment names.
    unsafe {
        let dv = _mm256_broadcastss_ps(_mm_cvtph_ps(_mm_cvtsi32_si128(i32::from(d))));
        for (h, v) in [first, second].into_iter().enumerate() {
            for part in 0..2 {
                let bytes = if part == 0 { v } else { _mm_srli_si128(v, 8) };
                let q = _mm256_cvtepi32_ps(_mm256_cvtepi8_epi32(bytes));
                _mm256_storeu_ps(out.add(h * 16 + part * 8), _mm256_mul_ps(dv, q));
            }
        }
    }
}

/// out = blocks `blocks` of `m` as f32 (q4: d · (q − 8)).
#[target_feature(enable = "avx2,fma,f16c")]
unsafe fn widen_q4(m: &BlockRows, blocks: Range<usize>, out: &mut [f32]) {
    // SAFETY: reached only through the AVX2 table (the CPU has AVX2, FMA and F16C); the
    // caller passes blocks of the bound matrix and 32 outputs for each.
    unsafe {
        for (b, i) in blocks.enumerate() {
            widen_q4_block(_mm_loadu_si128(m.quants(i).cast()), m.scale(i), out.as_mut_ptr().add(b * 32));
        }
    }
}

/// out[0..32] = d · (q − 8) for one q4 block whose 16 packed bytes are `raw`.
#[inline]
#[target_feature(enable = "avx2,fma,f16c")]
pub(super) unsafe fn widen_q4_block(raw: __m128i, d: u16, out: *mut f32) {
    // SAFETY: reached only through the AVX2 table (the CPU has AVX2, FMA and F16C); the
    // caller passes pointers valid for the ranges this function's comment names.
    unsafe {
        let mask = _mm_set1_epi8(15);
        let eight = _mm256_set1_ps(8.0);
        let dv = _mm256_broadcastss_ps(_mm_cvtph_ps(_mm_cvtsi32_si128(i32::from(d))));
        let halves = [_mm_and_si128(raw, mask), _mm_and_si128(_mm_srli_epi16(raw, 4), mask)];
        for (h, v) in halves.into_iter().enumerate() {
            for part in 0..2 {
                let bytes = if part == 0 { v } else { _mm_srli_si128(v, 8) };
                let q = _mm256_sub_ps(_mm256_cvtepi32_ps(_mm256_cvtepu8_epi32(bytes)), eight);
                _mm256_storeu_ps(out.add(h * 16 + part * 8), _mm256_mul_ps(dv, q));
            }
        }
    }
}
