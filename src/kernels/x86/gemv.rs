//! AVX2 matrix-vector kernels for float weights (f32, f16, bf16) and quantised weights with
//! float activations (W8A16, W4A16: q8 / q4 and GGUF's q8_0 / q4_0, the same blocks). Each
//! float output is accumulated like the reference: 8 lanes over k in steps of 8 (fused
//! multiply-add), lanes folded in the reference's order, the tail (cols mod 8) added in scalar.
//! Four weight rows share each activation load; up to two activation rows share each weight load.

use super::super::mat::Mat;
use super::super::reference;
use super::qrows::BlockRows;
use crate::format::blocks::QK;
use crate::format::{tiles, DType};
use core::arch::x86_64::*;
use std::ops::Range;

/// Element kinds of the float kernels (const parameters).
pub const F32: u8 = 0;
pub const F16: u8 = 1;
pub const BF16: u8 = 2;

/// 8 consecutive elements of dtype `K` from element `i` of `p`, as f32.
#[inline]
#[target_feature(enable = "avx2,fma,f16c")]
unsafe fn load8<const K: u8>(p: *const u8, i: usize) -> __m256 {
    // SAFETY: reached only through the AVX2 table (the CPU has AVX2, FMA and F16C); the
    // caller passes pointers valid for the ranges this function's comment names.
    unsafe {
        match K {
            F32 => _mm256_loadu_ps(p.cast::<f32>().add(i)),
            F16 => _mm256_cvtph_ps(_mm_loadu_si128(p.cast::<u16>().add(i).cast())),
            _ => {
                let h = _mm_loadu_si128(p.cast::<u16>().add(i).cast());
                _mm256_castsi256_ps(_mm256_slli_epi32(_mm256_cvtepu16_epi32(h), 16))
            }
        }
    }
}

/// Element `i` of dtype `K` as f32.
#[inline]
unsafe fn elem<const K: u8>(p: *const u8, i: usize) -> f32 {
    // SAFETY: reached only through the AVX2 table (the CPU has AVX2, FMA and F16C); the
    // caller passes pointers valid for the ranges this function's comment names.
    unsafe {
        match K {
            F32 => *p.cast::<f32>().add(i),
            F16 => reference::f16_to_f32(*p.cast::<u16>().add(i)),
            _ => reference::bf16_to_f32(*p.cast::<u16>().add(i)),
        }
    }
}

/// ((a0+a4)+(a2+a6)) + ((a1+a5)+(a3+a7)), the reference's fold.
#[inline]
#[target_feature(enable = "avx2,fma,f16c")]
pub(super) unsafe fn hsum(v: __m256) -> f32 {
    let s = _mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
    let s = _mm_add_ps(s, _mm_movehl_ps(s, s));
    _mm_cvtss_f32(_mm_add_ss(s, _mm_movehdup_ps(s)))
}

/// out[r][t] = row r of `w` (rows `row_bytes` apart, `cols` elements of dtype K) · x row t
/// (rows `cols` apart), for R rows and T activation rows. `TILED`: bf16r32 rows of one group
/// (`format::tiles`: a row's 32-column steps `UNIT_BYTES` apart, rows 64 bytes apart within a
/// step) — the same sums, read where that layout keeps them.
#[inline]
#[target_feature(enable = "avx2,fma,f16c")]
unsafe fn block<const K: u8, const R: usize, const T: usize, const TILED: bool>(
    w: *const u8,
    row_bytes: usize,
    cols: usize,
    x: *const f32,
    out: &mut [[f32; T]; R],
) {
    // SAFETY: reached only through the AVX2 table (the CPU has AVX2, FMA and F16C); the
    // caller passes pointers valid for the ranges this function's comment names.
    unsafe {
        let mut acc = [[_mm256_setzero_ps(); T]; R];
        let full = cols - cols % 8;
        let mut i = 0;
        let esize = if K == F32 { 4 } else { 2 };
        let prefetch = super::tune::software_prefetch();
        while i < full {
            if TILED && prefetch && i % TILE == 0 {
                // These rows' lines two steps on: one stream, read a quarter of a step at a time.
                for r in 0..R {
                    _mm_prefetch::<_MM_HINT_T0>(w.wrapping_add(r * row_bytes + (i / TILE + 2) * UNIT_BYTES).cast());
                }
            } else if !TILED && prefetch && i % (64 / esize) == 0 {
                // The next row group's line at this column (see qdot.rs: short rows restart
                // the hardware streams every group).
                for r in 0..R {
                    _mm_prefetch::<_MM_HINT_T0>(w.wrapping_add((r + R) * row_bytes + i * esize).cast());
                }
            }
            let mut xv = [_mm256_setzero_ps(); T];
            for (t, v) in xv.iter_mut().enumerate() {
                *v = _mm256_loadu_ps(x.add(t * cols + i));
            }
            // Row r's elements i .. i + 8: in its row, or in its line of step i / 32.
            let (wr, wi) = if TILED { (w.add((i / TILE) * UNIT_BYTES), i % TILE) } else { (w, i) };
            for (r, accr) in acc.iter_mut().enumerate() {
                let wv = load8::<K>(wr.add(r * row_bytes), wi);
                for (a, &xt) in accr.iter_mut().zip(&xv) {
                    *a = _mm256_fmadd_ps(wv, xt, *a);
                }
            }
            i += 8;
        }
        for (r, accr) in acc.iter().enumerate() {
            for (t, a) in accr.iter().enumerate() {
                let mut s = hsum(*a);
                for j in full..cols {
                    s += elem::<K>(w.add(r * row_bytes), j) * *x.add(t * cols + j);
                }
                out[r][t] = s;
            }
        }
    }
}

/// The matrix-vector product for float dtype K over `rows` (see `table::GemvFn`).
#[target_feature(enable = "avx2,fma,f16c")]
unsafe fn gemv_float<const K: u8, const TILED: bool>(
    w: *const u8,
    rb: usize,
    cols: usize,
    rows: Range<usize>,
    x: &[f32],
    n: usize,
    (out, len): (&mut [f32], usize),
) {
    let mut r = rows.start;
    // SAFETY: reached only through the AVX2 table (the CPU has AVX2, FMA and F16C); the
    // caller passes pointers valid for the ranges this function's comment names.
    unsafe {
        let eight = super::tune::float_gemv_rows() == 8;
        while r < rows.end {
            let base = w.add(r * rb);
            let i = r - rows.start;
            if n == 1 && rows.end - r >= 8 && eight {
                // One activation row: eight weight rows in flight per pass (four where
                // `tune::float_gemv_rows` says so: the branch below).
                let mut o = [[0f32; 1]; 8];
                block::<K, 8, 1, TILED>(base, rb, cols, x.as_ptr(), &mut o);
                for (dr, or) in o.iter().enumerate() {
                    out[i + dr] = or[0];
                }
                r += 8;
            } else if rows.end - r >= 4 {
                let mut t = 0;
                while t + 2 <= n {
                    let mut o = [[0f32; 2]; 4];
                    block::<K, 4, 2, TILED>(base, rb, cols, x.as_ptr().add(t * cols), &mut o);
                    for (dr, or) in o.iter().enumerate() {
                        out[t * len + i + dr] = or[0];
                        out[(t + 1) * len + i + dr] = or[1];
                    }
                    t += 2;
                }
                if t < n {
                    let mut o = [[0f32; 1]; 4];
                    block::<K, 4, 1, TILED>(base, rb, cols, x.as_ptr().add(t * cols), &mut o);
                    for (dr, or) in o.iter().enumerate() {
                        out[t * len + i + dr] = or[0];
                    }
                }
                r += 4;
            } else {
                for t in 0..n {
                    let mut o = [[0f32; 1]; 1];
                    block::<K, 1, 1, TILED>(base, rb, cols, x.as_ptr().add(t * cols), &mut o);
                    out[t * len + i] = o[0][0];
                }
                r += 1;
            }
        }
    }
}

/// One row of a W8A16 / W4A16 product: Σ_b d_b · (q_b · x_b) over the row's blocks b0 ..
/// b0 + nblocks of `m`, each block summed in 8 lanes.
#[target_feature(enable = "avx2,fma,f16c")]
unsafe fn dot_quant<const Q4: bool>(m: &BlockRows, b0: usize, nblocks: usize, x: *const f32) -> f32 {
    // SAFETY: reached only through the AVX2 table (the CPU has AVX2, FMA and F16C); the
    // caller passes blocks of the bound matrix and x holding nblocks·32 values.
    unsafe {
        let mut acc = _mm256_setzero_ps();
        let eight = _mm256_set1_ps(8.0);
        let mask = _mm_set1_epi8(15);
        for b in 0..nblocks {
            let (xb, qs) = (x.add(b * QK), m.quants(b0 + b));
            let mut s = _mm256_setzero_ps();
            if Q4 {
                let raw = _mm_loadu_si128(qs.cast());
                let lo = _mm_and_si128(raw, mask);
                let hi = _mm_and_si128(_mm_srli_epi16(raw, 4), mask);
                for (h, v) in [lo, hi].into_iter().enumerate() {
                    for part in 0..2 {
                        let bytes = if part == 0 { v } else { _mm_srli_si128(v, 8) };
                        let q = _mm256_sub_ps(_mm256_cvtepi32_ps(_mm256_cvtepu8_epi32(bytes)), eight);
                        s = _mm256_fmadd_ps(q, _mm256_loadu_ps(xb.add(h * 16 + part * 8)), s);
                    }
                }
            } else {
                for part in 0..4 {
                    let bytes = _mm_loadl_epi64(qs.add(part * 8).cast());
                    let q = _mm256_cvtepi32_ps(_mm256_cvtepi8_epi32(bytes));
                    s = _mm256_fmadd_ps(q, _mm256_loadu_ps(xb.add(part * 8)), s);
                }
            }
            let db = _mm256_broadcastss_ps(_mm_cvtph_ps(_mm_cvtsi32_si128(i32::from(m.scale(b0 + b)))));
            acc = _mm256_fmadd_ps(db, s, acc);
        }
        hsum(acc)
    }
}

/// The same as `dot_quant` in 16 lanes (AVX-512): each block two halves of 16.
#[target_feature(enable = "avx512f,avx512bw,avx512vl,avx2,fma,f16c")]
unsafe fn dot_quant_512<const Q4: bool>(m: &BlockRows, b0: usize, nblocks: usize, x: *const f32) -> f32 {
    // SAFETY: reached only through the AVX-512 table (the CPU has AVX-512 F/BW/VL and AVX2's
    // features); the caller passes blocks of the bound matrix and x holding nblocks·32 values.
    unsafe {
        let mut acc = _mm512_setzero_ps();
        let (eight, mask) = (_mm512_set1_ps(8.0), _mm_set1_epi8(15));
        for b in 0..nblocks {
            let (xb, qs) = (x.add(b * QK), m.quants(b0 + b));
            let (lo, hi) = if Q4 {
                let raw = _mm_loadu_si128(qs.cast());
                let (l, h) = (_mm_and_si128(raw, mask), _mm_and_si128(_mm_srli_epi16(raw, 4), mask));
                (
                    _mm512_sub_ps(_mm512_cvtepi32_ps(_mm512_cvtepu8_epi32(l)), eight),
                    _mm512_sub_ps(_mm512_cvtepi32_ps(_mm512_cvtepu8_epi32(h)), eight),
                )
            } else {
                (
                    _mm512_cvtepi32_ps(_mm512_cvtepi8_epi32(_mm_loadu_si128(qs.cast()))),
                    _mm512_cvtepi32_ps(_mm512_cvtepi8_epi32(_mm_loadu_si128(qs.add(16).cast()))),
                )
            };
            let s = _mm512_fmadd_ps(hi, _mm512_loadu_ps(xb.add(16)), _mm512_mul_ps(lo, _mm512_loadu_ps(xb)));
            let db = _mm512_broadcastss_ps(_mm_cvtph_ps(_mm_cvtsi32_si128(i32::from(m.scale(b0 + b)))));
            acc = _mm512_fmadd_ps(db, s, acc);
        }
        _mm512_reduce_add_ps(acc)
    }
}

/// A row dot of `dot_quant`'s form.
type QuantDot = unsafe fn(m: &BlockRows, b0: usize, nblocks: usize, x: *const f32) -> f32;

/// W8A16 / W4A16 product of a row-major q8 / q8_0 (`Q4` false) or q4 / q4_0 matrix (see
/// `table::GemvFn`; `qrows` says where each form keeps its blocks).
pub fn gemv_quant<const Q4: bool>(w: Mat<'_>, rows: Range<usize>, x: &[f32], n: usize, out: &mut [f32]) {
    // SAFETY: this function is reached only through the AVX2 and AVX-512 tables.
    unsafe { quant_rows(dot_quant::<Q4>, BlockRows::of::<Q4>(w), w, rows, x, n, out) }
}

/// The same in 16 lanes, for the AVX-512 table.
pub fn gemv_quant_512<const Q4: bool>(w: Mat<'_>, rows: Range<usize>, x: &[f32], n: usize, out: &mut [f32]) {
    // SAFETY: this function is reached only through the AVX-512 table.
    unsafe { quant_rows(dot_quant_512::<Q4>, BlockRows::of::<Q4>(w), w, rows, x, n, out) }
}

/// out[t·len + i] = dot(row rows.start + i, x[t]) over the blocks `m` of `w`.
///
/// # Safety
/// The CPU runs `dot`'s instructions.
#[inline(always)]
unsafe fn quant_rows(
    dot: QuantDot,
    m: BlockRows,
    w: Mat<'_>,
    rows: Range<usize>,
    x: &[f32],
    n: usize,
    out: &mut [f32],
) {
    let (len, cols) = (rows.len(), w.cols());
    let nb = cols / QK;
    assert!(rows.end <= w.rows() && x.len() >= n * cols && out.len() >= n * len);
    for (i, r) in rows.enumerate() {
        for t in 0..n {
            let xt = x[t * cols..(t + 1) * cols].as_ptr();
            // SAFETY: the caller's CPU runs `dot`; row r (< w.rows(), asserted) has blocks
            // r·nb .. (r+1)·nb inside the bound matrix, x row t holds cols values.
            out[t * len + i] = unsafe { dot(&m, r * nb, nb, xt) };
        }
    }
}

/// out[t·rows.len() + i] = w[rows.start + i] · x[t] for a float matrix of kind K (see
/// `table::GemvFn`).
pub fn gemv<const K: u8>(w: Mat<'_>, rows: Range<usize>, x: &[f32], n: usize, out: &mut [f32]) {
    let cols = w.cols();
    assert!(rows.end <= w.rows() && x.len() >= n * cols && out.len() >= n * rows.len());
    let esize = if K == F32 { 4 } else { 2 };
    assert_eq!(w.dtype().float_size(), Some(esize as u64), "gemv::<{K}> given a {} matrix", w.dtype());
    let len = rows.len();
    // SAFETY: the AVX2 table is only reachable when the CPU has AVX2, FMA and F16C; the bounds
    // of every row read are asserted above, the element size matches the matrix's.
    unsafe { gemv_float::<K, false>(w.bytes().as_ptr(), cols * esize, cols, rows, x, n, (out, len)) }
}

/// Columns per step and bytes per unit of bf16r32 (`format::tiles`).
const TILE: usize = tiles::TILE;
const UNIT_BYTES: usize = tiles::UNIT * 2;

/// `gemv::<BF16>` for a bf16r32 matrix (`format::tiles`): each group's rows in the range read
/// where the tile order keeps them — the same sums, so the same bits as the row-major matrix.
pub fn gemv_bf16r32(w: Mat<'_>, rows: Range<usize>, x: &[f32], n: usize, out: &mut [f32]) {
    let (cols, len) = (w.cols(), rows.len());
    assert!(rows.end <= w.rows() && x.len() >= n * cols && out.len() >= n * len);
    assert_eq!(w.dtype(), DType::Bf16R32, "gemv_bf16r32 given a {} matrix", w.dtype());
    let mut r = rows.start;
    while r < rows.end {
        // The rows r .. end of r's group: row j of them 64 bytes after row j − 1 in every step.
        let end = rows.end.min((r / TILE + 1) * TILE);
        let base = w.bytes()[2 * tiles::at(r, 0, cols)..].as_ptr();
        let at = r - rows.start;
        // SAFETY: the AVX2 table is only reachable when the CPU has AVX2, FMA and F16C; rows r ..
        // end lie in one group of the bound matrix (whole groups, cols a multiple of 32), whose
        // units hold each of them at base + 64 j + 2 KiB · step.
        unsafe {
            match n {
                1 => group_n1(base, cols, end - r, x.as_ptr(), &mut out[at..end - rows.start]),
                _ => gemv_float::<BF16, true>(base, 64, cols, 0..end - r, x, n, (&mut out[at..], len)),
            }
        };
        r = end;
    }
}

/// out[j] = row j of `rows` (≤ 32) bf16r32 rows of one group from `g` (row j's step s at g +
/// 64 j + 2 KiB · s) · x: `block`'s sums for one activation row, the group's units read once in
/// order (one stream; `block` over 8 rows at a time would read each unit in four strided passes)
/// with every row's 8-lane accumulator kept across the steps.
#[target_feature(enable = "avx2,fma,f16c")]
unsafe fn group_n1(g: *const u8, cols: usize, rows: usize, x: *const f32, out: &mut [f32]) {
    // SAFETY: reached only through the AVX2 table (the CPU has AVX2, FMA and F16C); the caller
    // passes a group's `rows` rows of `cols` columns at `g` and x of `cols` values.
    unsafe {
        let mut acc = [_mm256_setzero_ps(); TILE];
        for s in 0..cols / TILE {
            let unit = g.add(s * UNIT_BYTES);
            for l in 0..rows {
                _mm_prefetch::<_MM_HINT_T0>(unit.wrapping_add(512 + l * 64).cast());
            }
            let xs = x.add(s * TILE);
            let xv = [
                _mm256_loadu_ps(xs),
                _mm256_loadu_ps(xs.add(8)),
                _mm256_loadu_ps(xs.add(16)),
                _mm256_loadu_ps(xs.add(24)),
            ];
            for (j, a) in acc.iter_mut().enumerate().take(rows) {
                let line = unit.add(j * 64);
                for (q, &xq) in xv.iter().enumerate() {
                    *a = _mm256_fmadd_ps(load8::<BF16>(line, 8 * q), xq, *a);
                }
            }
        }
        for (o, a) in out.iter_mut().zip(&acc[..rows]) {
            *o = hsum(*a);
        }
    }
}

fn dot_one<const K: u8>(w: *const u8, cols: usize, x: &[f32]) -> f32 {
    assert!(x.len() >= cols);
    let mut o = [[0f32; 1]; 1];
    // SAFETY: AVX2 table only on AVX2+FMA+F16C CPUs; the callers' slices hold `cols` elements.
    unsafe { block::<K, 1, 1, false>(w, 0, cols, x.as_ptr(), &mut o) };
    o[0][0]
}

/// Σ w[i]·x[i].
pub fn dot_f32(w: &[f32], x: &[f32]) -> f32 {
    dot_one::<F32>(w.as_ptr().cast(), w.len(), x)
}

/// out[i] += row i of w ([out.len(), kc] f32) · x (kc values): `gemv_float`'s sums for one
/// activation row (`dot_f32`'s for each row, whatever its company), added in.
pub fn add_dots_f32(w: &[f32], kc: usize, x: &[f32], out: &mut [f32]) {
    let rows = out.len();
    assert!(w.len() >= rows * kc && x.len() >= kc && rows <= 8);
    let mut o = [0f32; 8];
    // SAFETY: AVX2 table only on AVX2+FMA+F16C CPUs; w holds `rows` rows of kc values (asserted),
    // x one row of kc, o `rows` outputs.
    unsafe { gemv_float::<F32, false>(w.as_ptr().cast(), kc * 4, kc, 0..rows, x, 1, (&mut o[..rows], rows)) };
    for (y, v) in out.iter_mut().zip(o) {
        *y += v;
    }
}

/// Σ f16(w[i])·x[i].
pub fn dot_f16(w: &[u16], x: &[f32]) -> f32 {
    dot_one::<F16>(w.as_ptr().cast(), w.len(), x)
}

/// Σ bf16(w[i])·x[i].
pub fn dot_bf16(w: &[u16], x: &[f32]) -> f32 {
    dot_one::<BF16>(w.as_ptr().cast(), w.len(), x)
}

#[target_feature(enable = "avx2,fma,f16c")]
unsafe fn axpy_float<const K: u8>(a: f32, x: *const u8, y: &mut [f32]) {
    let n = y.len();
    let full = n - n % 8;
    // SAFETY: reached only through the AVX2 table (the CPU has AVX2, FMA and F16C); the
    // caller passes pointers valid for the ranges this function's comment names.
    unsafe {
        let av = _mm256_set1_ps(a);
        for i in (0..full).step_by(8) {
            let yp = y.as_mut_ptr().add(i);
            _mm256_storeu_ps(yp, _mm256_fmadd_ps(av, load8::<K>(x, i), _mm256_loadu_ps(yp)));
        }
        for (i, yi) in y.iter_mut().enumerate().skip(full) {
            *yi += a * elem::<K>(x, i);
        }
    }
}

/// y[i] += a · x[i] (fused multiply-add over 8 lanes; the tail in scalar).
pub fn axpy_f32(a: f32, x: &[f32], y: &mut [f32]) {
    assert!(x.len() >= y.len());
    // SAFETY: AVX2 table only on AVX2+FMA+F16C CPUs; x holds y.len() elements (asserted).
    unsafe { axpy_float::<F32>(a, x.as_ptr().cast(), y) }
}

/// y[i] += a · f16(x[i]).
pub fn axpy_f16(a: f32, x: &[u16], y: &mut [f32]) {
    assert!(x.len() >= y.len());
    // SAFETY: as in axpy_f32.
    unsafe { axpy_float::<F16>(a, x.as_ptr().cast(), y) }
}

/// y[i] += a · bf16(x[i]).
pub fn axpy_bf16(a: f32, x: &[u16], y: &mut [f32]) {
    assert!(x.len() >= y.len());
    // SAFETY: as in axpy_f32.
    unsafe { axpy_float::<BF16>(a, x.as_ptr().cast(), y) }
}
