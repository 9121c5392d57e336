//! AVX-512 BF16 kernels: bf16 weights against bf16-rounded activations (`Reduced` mode, see
//! `kernels::bf16act`). One `vdpbf16ps` adds two bf16 × bf16 products (exact in f32) to each
//! f32 lane, so a 512-bit instruction does 32 multiply-adds where an f32 FMA does 16 — and the
//! weights need no widening.
//!
//! * Matrix-vector: 32 columns per step, weight and activation vectors in their natural order
//!   (lane i pairs columns 2i, 2i + 1); one activation row against rows of up to 8 KiB: one
//!   row at a time (one sequential stream, 2 chains); otherwise up to 8 weight rows or 4 × 4
//!   rows × activation rows in flight; the row tail by masked loads (zeros add nothing); 16
//!   lanes summed at the end.
//! * GEMM micro-tile: for each column pair of the block, one load of a panel (16 activation rows'
//!   pairs), or of two panels side by side, meets a broadcast of each of 8 weight rows' pair,
//!   read straight from the stored rows; a last panel of at most 8 activation rows takes its
//!   lower 8 lanes only (the 256-bit form: the same operation per lane), beside the whole ones.
//!   One chain per output over the pairs in ascending order; a panel's rows past the
//!   activations are zeros, computed and never read (stored only within a half panel's 8 lanes).

use super::super::mat::Mat;
use super::super::table::{BF16_MR, NR};
use crate::format::DType;
use core::arch::x86_64::*;
use std::ops::Range;

/// Prefetch distance of the matrix-vector kernel: the next row group's line at this column.
/// Always with several activation rows (a prefill's small expert groups, batched decode): each
/// weight row group then meets them all while the next one is fetched. Zen 5 (EPYC VM, cpu
/// family 1Ah), one thread, 16384 × 2048 bf16 (`cargo bench --bench kernels --
/// matmul_16384x2048_bf16`, fastest of 10, two rounds, load 4–5, prefetch off → on): n = 4
/// 3.0 → 2.0–2.3 ms, 8 3.9–4.0 → 2.2–2.6, 12 4.6–4.9 → 3.5–3.8. One activation row (decode)
/// keeps the path's choice (`tune`).
const LINE: usize = 32;

/// Rows up to this many columns (8 KiB) are read one at a time by a decode product: eight of
/// them in lockstep are eight streams too short for the hardware prefetchers. Zen 4, one
/// thread, `cargo bench --bench kernels -- gemv_bf16_row_width` (median GB/s, one at a time vs
/// eight in lockstep, 4 KiB pages, load 1): 512 columns 21–23 vs 10–11, 1024 23 vs 12.5, 2048
/// 25 vs 16.7, 4096 within the noise; at 8192 lockstep wins (22–23 vs 14–18). Through 2 MiB
/// pages (a C probe of both loops, load 7) one at a time wins up to 4096 columns (2880: 14–22
/// vs 11–13 GB/s; 4096: 13–18.5 vs 10–13) and ties at 8192.
const SHORT_ROW: usize = 4096;

/// acc + pairwise bf16 products of a and b (lane i: a[2i]·b[2i] + a[2i+1]·b[2i+1]).
#[inline]
#[target_feature(enable = "avx512f,avx512bw,avx512vl,avx512bf16")]
fn dp(acc: __m512, a: __m512i, b: __m512i) -> __m512 {
    // SAFETY: __m512i and __m512bh are both 512 bits of plain data.
    let (a, b) = unsafe { (std::mem::transmute::<__m512i, __m512bh>(a), std::mem::transmute::<__m512i, __m512bh>(b)) };
    _mm512_dpbf16_ps(acc, a, b)
}

/// out[t·rows.len() + i] = w[rows.start + i] · xb[t] (see `table::GemvBf16Fn`).
pub fn gemv(w: Mat<'_>, rows: Range<usize>, xb: &[u16], n: usize, out: &mut [f32]) {
    assert_eq!(w.dtype(), DType::BF16, "bf16 gemv on a {} matrix", w.dtype());
    let cols = w.cols();
    assert!(rows.end <= w.rows() && xb.len() >= n * cols && out.len() >= n * rows.len());
    // SAFETY: reached only through the AVX-512 BF16 table (the CPU has the features); rows,
    // activations and outputs are in bounds (asserted above).
    unsafe { gemv_rows(w.as_u16().as_ptr(), cols, rows, xb.as_ptr(), n, out) }
}

#[target_feature(enable = "avx512f,avx512bw,avx512vl,avx512bf16")]
unsafe fn gemv_rows(w: *const u16, cols: usize, rows: Range<usize>, x: *const u16, n: usize, out: &mut [f32]) {
    let len = rows.len();
    let mut r = rows.start;
    // The next row group's lines are asked for while this one computes (see `LINE`).
    let prefetch = n > 1 || super::tune::software_prefetch();
    // SAFETY: the caller's bounds: rows < the matrix's, n activation rows of cols.
    unsafe {
        if n == 1 && cols <= SHORT_ROW {
            for (i, r) in rows.enumerate() {
                out[i] = row_alone(w.add(r * cols), cols, x);
            }
            return;
        }
        while r < rows.end {
            let (base, i) = (w.add(r * cols), r - rows.start);
            if n == 1 && rows.end - r >= 8 {
                let mut o = [[0f32; 1]; 8];
                block::<8, 1>(base, cols, x, prefetch, &mut o);
                (0..8).for_each(|d| out[i + d] = o[d][0]);
                r += 8;
            } else if rows.end - r >= 4 {
                let mut t = 0;
                while t < n {
                    let xt = x.add(t * cols);
                    match n - t {
                        1 => put::<1>(block_of::<1>(base, cols, xt, prefetch), out, t, len, i),
                        2 => put::<2>(block_of::<2>(base, cols, xt, prefetch), out, t, len, i),
                        3 => put::<3>(block_of::<3>(base, cols, xt, prefetch), out, t, len, i),
                        _ => put::<4>(block_of::<4>(base, cols, xt, prefetch), out, t, len, i),
                    }
                    t += 4;
                }
                r += 4;
            } else {
                for t in 0..n {
                    let mut o = [[0f32; 1]; 1];
                    block::<1, 1>(base, cols, x.add(t * cols), prefetch, &mut o);
                    out[t * len + i] = o[0][0];
                }
                r += 1;
            }
        }
    }
}

/// One short row against one activation row, as one sequential stream: one chain of 32 columns
/// per step (the tail by masked loads), the order `block` sums in, so that a row's product does
/// not depend on how many activation rows the call has (a decode step of one sequence or of
/// several gives the same bits).
#[inline]
#[target_feature(enable = "avx512f,avx512bw,avx512vl,avx512bf16")]
unsafe fn row_alone(w: *const u16, cols: usize, x: *const u16) -> f32 {
    // SAFETY: `cols` elements of w and x are readable (the caller's bounds).
    unsafe {
        let mut acc = _mm512_setzero_ps();
        let mut i = 0;
        while i + 32 <= cols {
            acc = dp(acc, _mm512_loadu_si512(w.add(i).cast()), _mm512_loadu_si512(x.add(i).cast()));
            i += 32;
        }
        if i < cols {
            let m = (1u32 << (cols - i)) - 1;
            acc = dp(acc, _mm512_maskz_loadu_epi16(m, w.add(i).cast()), _mm512_maskz_loadu_epi16(m, x.add(i).cast()));
        }
        _mm512_reduce_add_ps(acc)
    }
}

/// Four weight rows × T activation rows.
#[inline]
#[target_feature(enable = "avx512f,avx512bw,avx512vl,avx512bf16")]
unsafe fn block_of<const T: usize>(w: *const u16, cols: usize, x: *const u16, prefetch: bool) -> [[f32; T]; 4] {
    let mut o = [[0f32; T]; 4];
    // SAFETY: the caller's bounds (see `block`).
    unsafe { block::<4, T>(w, cols, x, prefetch, &mut o) };
    o
}

/// Store a 4 × T block: out[(t + j)·len + i + r] = o[r][j].
#[inline]
fn put<const T: usize>(o: [[f32; T]; 4], out: &mut [f32], t: usize, len: usize, i: usize) {
    for (r, or) in o.iter().enumerate() {
        for (j, &v) in or.iter().enumerate() {
            out[(t + j) * len + i + r] = v;
        }
    }
}

/// out[r][t] = weight row r (rows `cols` apart from `w`) · activation row t (rows `cols` apart
/// from `x`), for R weight rows and T activation rows.
#[inline]
#[target_feature(enable = "avx512f,avx512bw,avx512vl,avx512bf16")]
unsafe fn block<const R: usize, const T: usize>(
    w: *const u16,
    cols: usize,
    x: *const u16,
    prefetch: bool,
    out: &mut [[f32; T]; R],
) {
    // SAFETY: R rows of `cols` elements from w and T from x are readable (the caller's bounds);
    // the prefetches may point anywhere.
    unsafe {
        let mut acc = [[_mm512_setzero_ps(); T]; R];
        let full = cols - cols % 32;
        // One step of 32 columns from column i; `mask` Some for the row tail (masked loads:
        // the lanes past the row read as zeros), None for a whole step (plain loads).
        let step = |acc: &mut [[__m512; T]; R], i: usize, mask: Option<__mmask32>| {
            let load = |p: *const u16| match mask {
                None => _mm512_loadu_si512(p.cast()),
                Some(m) => _mm512_maskz_loadu_epi16(m, p.cast()),
            };
            let mut xv = [_mm512_setzero_si512(); T];
            for (t, v) in xv.iter_mut().enumerate() {
                *v = load(x.add(t * cols + i));
            }
            for (r, accr) in acc.iter_mut().enumerate() {
                let wv = load(w.add(r * cols + i));
                for (a, &xt) in accr.iter_mut().zip(&xv) {
                    *a = dp(*a, wv, xt);
                }
            }
        };
        let mut i = 0;
        while i < full {
            if prefetch && i % LINE == 0 {
                for r in 0..R {
                    _mm_prefetch::<_MM_HINT_T0>(w.wrapping_add((r + R) * cols + i).cast());
                }
            }
            step(&mut acc, i, None);
            i += 32;
        }
        if full < cols {
            step(&mut acc, full, Some((1u32 << (cols - full)) - 1));
        }
        for (r, accr) in acc.iter().enumerate() {
            for (t, a) in accr.iter().enumerate() {
                out[r][t] = _mm512_reduce_add_ps(*a);
            }
        }
    }
}

/// The GEMM micro-tile (see `table::TileBf16Fn`).
pub fn tile(w: Mat<'_>, r0: usize, ks: Range<usize>, panels: &[&[u32]], half: bool, c: &mut [f32], ldc: usize) {
    assert_eq!(w.dtype(), DType::BF16, "bf16 tile on a {} matrix", w.dtype());
    let (rows, cols, k0, kc) = (w.rows(), w.cols(), ks.start, ks.len());
    let mr = BF16_MR.min(rows.saturating_sub(r0));
    assert!(
        mr > 0 && k0 + kc <= cols && k0.is_multiple_of(2) && kc.is_multiple_of(2),
        "bf16 tile: rows {r0}.. cols {k0}+{kc}"
    );
    let width = panels.len() * NR - if half { NR / 2 } else { 0 };
    assert!(
        matches!((panels.len(), half), (1 | 2, _) | (3, true))
            && panels.iter().all(|b| b.len() >= kc / 2 * NR)
            && c.len() >= (mr - 1) * ldc + width,
        "bf16 tile: {} panels (half {half}), short panel or output",
        panels.len()
    );
    let at = |i: usize| w.as_u16()[(r0 + i) * cols + k0..].as_ptr();
    let (pairs, b) = (kc / 2, |p: usize| panels[p].as_ptr());
    // SAFETY: reached only through the AVX-512 BF16 table; rows r0 .. r0 + mr exist and hold
    // columns k0 .. k0 + kc, the panels hold kc / 2 pairs of NR and c the rows' outputs (asserted).
    unsafe {
        let c = c.as_mut_ptr();
        match (panels.len(), half) {
            (1, false) => tile_of::<1, 0>(at, mr, cols, [b(0)], [], pairs, c, ldc),
            (1, true) => tile_of::<0, 1>(at, mr, cols, [], [b(0)], pairs, c, ldc),
            (2, false) => tile_of::<2, 0>(at, mr, cols, [b(0), b(1)], [], pairs, c, ldc),
            (2, true) => tile_of::<1, 1>(at, mr, cols, [b(0)], [b(1)], pairs, c, ldc),
            _ => tile_of::<2, 1>(at, mr, cols, [b(0), b(1)], [b(2)], pairs, c, ldc),
        }
    }
}

/// The tile's mr rows (row i from `at(i)`, rows `ldw` apart) against P whole panels and H half
/// panels: the 8-row body, or one row at a time for a partial last tile.
#[allow(clippy::too_many_arguments)]
#[target_feature(enable = "avx512f,avx512bw,avx512vl,avx512bf16")]
unsafe fn tile_of<'a, const P: usize, const H: usize>(
    at: impl Fn(usize) -> *const u16 + 'a,
    mr: usize,
    ldw: usize,
    b: [*const u32; P],
    bh: [*const u32; H],
    pairs: usize,
    c: *mut f32,
    ldc: usize,
) {
    // SAFETY: the caller's bounds (see `tile`).
    unsafe {
        if mr == BF16_MR {
            tile_rows::<BF16_MR, P, H>(at(0), ldw, b, bh, pairs, c, ldc)
        } else {
            (0..mr).for_each(|i| tile_rows::<1, P, H>(at(i), ldw, b, bh, pairs, c.add(i * ldc), ldc))
        }
    }
}

// The tiles add `bv` · the broadcast pair with the broadcast embedded in the instruction: LLVM
// does not fold `_mm512_set1_epi32` of a load into vdpbf16ps, and the separate broadcast costs
// ~25 % of the tile's speed on Zen 4. Each asm reads the 4 bytes at its pointer (inside row i:
// the caller's bounds) and writes only its accumulator; the prefetches may point anywhere.

/// Column pairs per 64-byte line of a weight row: a whole tile asks for the next tile's rows (the
/// BF16_MR rows after its own, at the column it is reading) one line each per this many pairs,
/// so a tile's weights are on their way while the tile before it computes. The hardware
/// prefetchers alone start each row's stream late: a tile streams 8 rows of up to 4 KiB each
/// from memory when few panels share them. Zen 5 (EPYC VM, cpu family 1Ah), one thread,
/// 16384 × 2048 bf16 (`cargo bench --bench kernels -- matmul_16384x2048_bf16`, fastest of 10,
/// two rounds each, load 3.3–5):
/// n = 16 4.0–4.4 → 3.1 ms, 24 6.7–7.1 → 6.1, 32 7.0–7.3 → 6.2, 48 10.1–10.4 → 9.3, 64
/// 14.0–14.1 → 13.4; a prefetch into L2 only (T1) instead of L1 gained the same within 0.1 ms.
const NEXT_TILE_LINE: usize = 16;

/// The next tile's lines are asked for this many pairs (4 lines) behind the column the tile
/// reads. Rows of 2048 bf16 columns are 4 KiB apart, so every row's line at one column falls in
/// the same L1 set (Zen 5: 12 ways): the tile's 8 lines and, at the same column, the next tile's
/// 8 evicted each other. Behind the tile they fill sets it has left (the next tile's last
/// NEXT_TILE_LAG pairs are left to the hardware prefetchers). Zen 5 (EPYC VM), one core, the
/// tile's loop alone in C (8 rows × 2 panels, 1024 pairs, thread CPU time, load 9): 16384 rows
/// from memory 205–208 → 241 G multiply-adds/s (no prefetch 186), 1408 rows from L3 217–222 →
/// 244 (no prefetch 239–245); 1408-column rows, which do not alias, 240 either way.
const NEXT_TILE_LAG: usize = 64;

/// c[i·ldc + NR·p + j] += Σ_q pair q of row i (rows `ldw` apart from w) · b[p][q·NR + j], for R
/// rows, P whole panels side by side and j < NR (16 lanes), then H half panels (at most one:
/// j < NR / 2, 8 lanes, after the whole ones). Two panels give each weight pair's
/// broadcast two products and the tile 2·R independent chains: with R chains of one panel the
/// tile waited on their latency on Zen 5, not on the width of its instructions — a last panel of
/// at most 8 rows once took an 8-lane tile alone, and it cost as much as a 16-lane one (16384 ×
/// 2048, one thread: n = 24 6.1 ms, n = 32 6.2 ms; with both panels in one tile 5.7–5.9 and
/// 5.8–6.1 ms, n = 48 9.3 → 8.4, n = 64 13.4 → 11.3). Beside whole panels, as here, an 8-lane
/// half panel costs no latency; on Zen 4, whose 512-bit `vdpbf16ps` is two 256-bit halves (one
/// per cycle, latency 6: measured), it costs half a whole one.
#[target_feature(enable = "avx512f,avx512bw,avx512vl,avx512bf16")]
unsafe fn tile_rows<const R: usize, const P: usize, const H: usize>(
    w: *const u16,
    ldw: usize,
    b: [*const u32; P],
    bh: [*const u32; H],
    pairs: usize,
    c: *mut f32,
    ldc: usize,
) {
    // SAFETY: the caller's bounds (see `tile`).
    unsafe {
        let mut acc = [[_mm512_setzero_ps(); P]; R];
        let mut acch = [[_mm256_setzero_ps(); H]; R];
        for i in 0..R {
            for (p, a) in acc[i].iter_mut().enumerate() {
                *a = _mm512_loadu_ps(c.add(i * ldc + p * NR));
            }
            for a in acch[i].iter_mut() {
                *a = _mm256_loadu_ps(c.add(i * ldc + P * NR));
            }
        }
        for line in (0..pairs).step_by(NEXT_TILE_LINE) {
            if R == BF16_MR && line >= NEXT_TILE_LAG {
                for i in 0..R {
                    _mm_prefetch::<_MM_HINT_T0>(w.wrapping_add((i + R) * ldw + 2 * (line - NEXT_TILE_LAG)).cast());
                }
            }
            for q in line..(line + NEXT_TILE_LINE).min(pairs) {
                let bv = b.map(|b| _mm512_loadu_si512(b.add(q * NR).cast()));
                let bvh = bh.map(|b| _mm256_loadu_si256(b.add(q * NR).cast()));
                for i in 0..R {
                    let p = w.add(i * ldw + 2 * q);
                    for (a, &bv) in acc[i].iter_mut().zip(&bv) {
                        core::arch::asm!(
                            "vdpbf16ps {a}, {b}, dword ptr [{p}]{{1to16}}",
                            a = inout(zmm_reg) *a,
                            b = in(zmm_reg) bv,
                            p = in(reg) p,
                            options(pure, readonly, nostack, preserves_flags)
                        );
                    }
                    for (a, &bv) in acch[i].iter_mut().zip(&bvh) {
                        core::arch::asm!(
                            "vdpbf16ps {a:y}, {b:y}, dword ptr [{p}]{{1to8}}",
                            a = inout(zmm_reg) *a,
                            b = in(zmm_reg) bv,
                            p = in(reg) p,
                            options(pure, readonly, nostack, preserves_flags)
                        );
                    }
                }
            }
        }
        for i in 0..R {
            for (p, a) in acc[i].iter().enumerate() {
                _mm512_storeu_ps(c.add(i * ldc + p * NR), *a);
            }
            for a in &acch[i] {
                _mm256_storeu_ps(c.add(i * ldc + P * NR), *a);
            }
        }
    }
}
