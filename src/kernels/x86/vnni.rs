//! AVX-512 VNNI int8 kernels for the 8-row interleaved block matrices (q8r8 / q4r8): the same
//! units, broadcasts and scaling as the AVX2 kernels of `qgroup`, with one `vpdpbusd`
//! (4 u8 × i8 products summed into each i32 lane) where AVX2 needs `vpmaddubsw` + `vpmaddwd`
//! (+ the sign moves of q8). The 4-byte chunks of the interleaved layout are exactly what one
//! `vpdpbusd` lane consumes.
//!
//! * Fewer than 8 activation rows (decode): one row group per pass, 256-bit EVEX forms
//!   (AVX512VL), up to 8 activation rows sharing each unpacked weight load.
//! * From 8 activation rows on (prefill, batched experts): two row groups per pass in the two
//!   halves of a zmm, so each activation broadcast (folded into `vpdpbusd` as `{1to16}`) meets 16
//!   rows, against the activations in panels of 8 rows (`actpanel`: one pointer reaches every
//!   row and chunk, and a block's sum starts at its stored offset instead of subtracting it).
//!   Zen 4 runs a zmm `vpdpbusd` as two 256-bit halves, so this does not add multiply-adds per
//!   cycle; it halves the broadcasts, the scaling instructions and the address registers per
//!   multiply-add, which is what bounded the one-group kernel (q4r8 512 × 2048 × 1408: 115 →
//!   155 G multiply-adds/s of thread CPU time on one Zen 4 core; docs/performance.md).
//!
//! The integer block sums equal the AVX2 kernels' (and the reference's) exactly, and they are
//! scaled and summed in the same float operations: results are bit-identical to the AVX2 path.
//!
//! * W4A8: per chunk and activation row, two `vpdpbusd` (low nibbles × elements 4c.., high
//!   nibbles × elements 16 + 4c..); the offset 8·Σqx is subtracted per block, as in AVX2.
//! * W8A8: the signed weights are made unsigned once per chunk (w + 128 = w ⊕ 0x80, shared by
//!   every activation row), one `vpdpbusd` per activation row, and 128·Σqx subtracted per block
//!   (Σ (w + 128)·x = Σ w·x + 128·Σ x, exact in i32).

use super::super::actpanel::{ActPanels, PANEL, PANEL_BLOCK};
use super::super::actq::QuantizedActs;
use super::super::generic;
use super::super::mat::Mat;
use super::qgroup::{bcast4, by_groups, each, gemv_i8_with, prefetch_unit, Acts, GroupI8, Grouped};
use crate::format::blocks::{CHUNK, GROUP_ROWS, QK};
use core::arch::x86_64::*;
use std::ops::Range;

/// The VNNI group kernels: eight activation rows per pass (AVX-512 has 32 vector registers).
pub(super) struct Vnni;

impl GroupI8 for Vnni {
    const MAX_T: usize = 8;

    #[target_feature(enable = "avx512f,avx512bw,avx512vl,avx512vnni,avx2,fma,f16c")]
    unsafe fn run(g: Grouped, grps: Range<usize>, x: &[Acts], out: *mut f32, stride: usize) {
        // SAFETY: the caller's contract (see the trait).
        unsafe {
            let a = |k: usize| x[k.min(x.len() - 1)];
            match (g.q4, x.len()) {
                (true, 8) => each(grps, out, stride, |grp| q4::<8>(g, grp, &std::array::from_fn(a))),
                (true, 4) => each(grps, out, stride, |grp| q4::<4>(g, grp, &std::array::from_fn(a))),
                (true, 2) => each(grps, out, stride, |grp| q4::<2>(g, grp, &std::array::from_fn(a))),
                (true, _) => each(grps, out, stride, |grp| q4::<1>(g, grp, &std::array::from_fn(a))),
                (false, 8) => each(grps, out, stride, |grp| q8::<8>(g, grp, &std::array::from_fn(a))),
                (false, 4) => each(grps, out, stride, |grp| q8::<4>(g, grp, &std::array::from_fn(a))),
                (false, 2) => each(grps, out, stride, |grp| q8::<2>(g, grp, &std::array::from_fn(a))),
                (false, _) => each(grps, out, stride, |grp| q8::<1>(g, grp, &std::array::from_fn(a))),
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

/// W8A8 / W4A8 product of interleaved `w` (see `table::GemvI8Fn`), AVX-512 VNNI: below a panel
/// of activation rows (decode) the one-group kernels, from there the two-group ones.
pub(in crate::kernels) fn gemv_i8(w: Mat<'_>, rows: Range<usize>, xa: &QuantizedActs, n: usize, out: &mut [f32]) {
    if n < PANEL {
        return gemv_i8_with::<Vnni>(w, rows, xa, n, out);
    }
    let (g, cols) = (Grouped::of(w), w.cols());
    assert!(xa.cols == cols && xa.qs.len() >= n * cols && xa.sums.len() >= n * g.nb && out.len() >= n * rows.len());
    assert!(rows.end <= w.rows());
    let p = xa.panels();
    let panels = n.div_ceil(PANEL);
    assert!(p.nb == g.nb && p.q.len() >= panels * g.nb * PANEL_BLOCK && p.d.len() >= panels * g.nb * PANEL);
    assert!(p.off_q4.len() == p.d.len() && p.off_q8.len() == p.d.len());
    let len = rows.len();
    by_groups(
        rows,
        n,
        2,
        out,
        |r, o| generic::gemv_i8(w, r, xa, n, o),
        |grp, k, at, out, tokens| {
            // Passes of 8 activation rows (then 4, 2, 1: tokens start at a multiple of 8, so a
            // pass never leaves its panel), their results straight to out: rows t.., k·8 values
            // each from at.
            let mut t = tokens.start;
            while t < tokens.end {
                let take = 1usize << (tokens.end - t).min(PANEL).ilog2();
                assert!(out.len() >= (t + take - 1) * len + at + k * GROUP_ROWS);
                let o = out[t * len + at..].as_mut_ptr();
                if k == 2 {
                    // SAFETY: this table only on CPUs with its features; groups grp, grp + 1 lie
                    // inside the matrix (rows.end ≤ w.rows() asserted), rows t..t + take inside
                    // the panels (lengths asserted), and the last write ends inside `out`
                    // (asserted).
                    unsafe { two_groups(g, grp, PanelAt::of(p, t, g.q4), take, o, len) };
                } else {
                    let x: [Acts; PANEL] = std::array::from_fn(|i| acts(xa, (t + i).min(t + take - 1)));
                    // SAFETY: as above, for group grp and the row-major activation rows.
                    unsafe { Vnni::run(g, grp..grp + 1, &x[..take], o, len) };
                }
                t += take;
            }
        },
    );
}

/// Row-major activation row t of `xa`.
fn acts(xa: &QuantizedActs, t: usize) -> Acts {
    let (xq, xd) = xa.row(t);
    Acts { q: xq.as_ptr(), d: xd.as_ptr(), sums: xa.row_sums(t).as_ptr() }
}

/// Activation row t of a panel set and the rows after it in its panel: pointers to its chunk 0
/// of block 0, its scale and its offset (q4's or q8's).
#[derive(Clone, Copy)]
struct PanelAt {
    q: *const i8,
    d: *const f32,
    off: *const i32,
}

impl PanelAt {
    fn of(p: &ActPanels, t: usize, q4: bool) -> PanelAt {
        let (panel, slot) = (t / PANEL, t % PANEL);
        let at = panel * p.nb * PANEL + slot;
        let off = if q4 { &p.off_q4 } else { &p.off_q8 };
        PanelAt {
            q: p.q.as_ptr().wrapping_add(panel * p.nb * PANEL_BLOCK + slot * CHUNK),
            d: p.d.as_ptr().wrapping_add(at),
            off: off.as_ptr().wrapping_add(at),
        }
    }
}

/// out[t·stride + j] = row 8·grp + j (j < 16: groups grp and grp + 1) · panel row t, for t <
/// take.
#[target_feature(enable = "avx512f,avx512bw,avx512vl,avx512vnni,avx2,fma,f16c")]
unsafe fn two_groups(g: Grouped, grp: usize, p: PanelAt, take: usize, out: *mut f32, stride: usize) {
    // SAFETY: the caller's contract: both groups and `take` panel rows in bounds, out valid for
    // the writes named.
    unsafe {
        match (g.q4, take) {
            (true, 8) => store16(q4x16::<8>(g, grp, p), out, stride),
            (true, 4) => store16(q4x16::<4>(g, grp, p), out, stride),
            (true, 2) => store16(q4x16::<2>(g, grp, p), out, stride),
            (true, _) => store16(q4x16::<1>(g, grp, p), out, stride),
            (false, 8) => store16(q8x16::<8>(g, grp, p), out, stride),
            (false, 4) => store16(q8x16::<4>(g, grp, p), out, stride),
            (false, 2) => store16(q8x16::<2>(g, grp, p), out, stride),
            (false, _) => store16(q8x16::<1>(g, grp, p), out, stride),
        }
    }
}

/// out[t·stride..t·stride + 16] = v[t].
///
/// SAFETY: out valid for those writes; the CPU has AVX-512 F.
#[inline]
#[target_feature(enable = "avx512f,avx512bw,avx512vl,avx512vnni,avx2,fma,f16c")]
unsafe fn store16<const T: usize>(v: [__m512; T], out: *mut f32, stride: usize) {
    for (t, vt) in v.into_iter().enumerate() {
        // SAFETY: the caller's contract.
        unsafe { _mm512_storeu_ps(out.add(t * stride), vt) };
    }
}

/// Chunk c (32 bytes: 4 of each of 8 rows) of unit (grp, b) in the low half, of (grp + 1, b)
/// in the high half (also the AMX-INT8 kernel's B tiles: its table is this one's, so the CPU has
/// VNNI).
#[inline]
#[target_feature(enable = "avx512f,avx512bw,avx512vl,avx512vnni,avx2,fma,f16c")]
pub(crate) unsafe fn chunk16(ua: *const u8, ub: *const u8, c: usize) -> __m512i {
    // SAFETY: the caller passes units holding chunk c.
    unsafe {
        let lo = _mm512_castsi256_si512(_mm256_loadu_si256(ua.add(c * 32).cast()));
        _mm512_inserti64x4::<1>(lo, _mm256_loadu_si256(ub.add(c * 32).cast()))
    }
}

/// The 16 scales of units (grp, b) and (grp + 1, b), as f32.
#[inline]
#[target_feature(enable = "avx512f,avx512bw,avx512vl,avx512vnni,avx2,fma,f16c")]
unsafe fn scales16(g: Grouped, grp: usize, b: usize) -> __m512 {
    // SAFETY: the caller passes units in bounds.
    unsafe {
        let lo = _mm256_castsi128_si256(_mm_loadu_si128(g.scales(grp, b).cast()));
        _mm512_cvtph_ps(_mm256_inserti128_si256::<1>(lo, _mm_loadu_si128(g.scales(grp + 1, b).cast())))
    }
}

/// Four activation bytes at `p` in every i32 lane of a zmm.
#[inline]
#[target_feature(enable = "avx512f,avx512bw,avx512vl,avx512vnni,avx2,fma,f16c")]
unsafe fn bcast4z(p: *const i8) -> __m512i {
    // SAFETY: the caller passes 4 readable bytes at p (read unaligned).
    unsafe { _mm512_set1_epi32(p.cast::<i32>().read_unaligned()) }
}

/// Lane j of result t = row 8·grp + j (two groups) · panel row t, W4A8: the one-group kernel's
/// integer sums (started at the offset −8·Σqx) and float steps, 16 rows per instruction.
#[target_feature(enable = "avx512f,avx512bw,avx512vl,avx512vnni,avx2,fma,f16c")]
unsafe fn q4x16<const T: usize>(g: Grouped, grp: usize, p: PanelAt) -> [__m512; T] {
    // SAFETY: the caller's contract (`two_groups`).
    unsafe {
        let m = _mm512_set1_epi8(15);
        let mut acc = [_mm512_setzero_ps(); T];
        for b in 0..g.nb {
            let (ua, ub) = (g.unit(grp, b), g.unit(grp + 1, b));
            prefetch_unit(g, ua);
            prefetch_unit(g, ub);
            let xq = p.q.add(b * PANEL_BLOCK);
            let mut s: [__m512i; T] = std::array::from_fn(|t| _mm512_set1_epi32(*p.off.add(b * PANEL + t)));
            for c in 0..4 {
                let w = chunk16(ua, ub, c);
                let (lo, hi) = (_mm512_and_si512(w, m), _mm512_and_si512(_mm512_srli_epi16::<4>(w), m));
                for (t, st) in s.iter_mut().enumerate() {
                    *st = _mm512_dpbusd_epi32(*st, lo, bcast4z(xq.add((c * PANEL + t) * CHUNK)));
                    *st = _mm512_dpbusd_epi32(*st, hi, bcast4z(xq.add(((4 + c) * PANEL + t) * CHUNK)));
                }
            }
            let d = scales16(g, grp, b);
            for (t, (a, st)) in acc.iter_mut().zip(s).enumerate() {
                let dx = _mm512_mul_ps(d, _mm512_set1_ps(*p.d.add(b * PANEL + t)));
                *a = _mm512_fmadd_ps(_mm512_cvtepi32_ps(st), dx, *a);
            }
        }
        acc
    }
}

/// Lane j of result t = row 8·grp + j (two groups) · panel row t, W8A8 (offset −128·Σqx).
#[target_feature(enable = "avx512f,avx512bw,avx512vl,avx512vnni,avx2,fma,f16c")]
unsafe fn q8x16<const T: usize>(g: Grouped, grp: usize, p: PanelAt) -> [__m512; T] {
    // SAFETY: the caller's contract (`two_groups`).
    unsafe {
        let flip = _mm512_set1_epi8(-128);
        let mut acc = [_mm512_setzero_ps(); T];
        for b in 0..g.nb {
            let (ua, ub) = (g.unit(grp, b), g.unit(grp + 1, b));
            prefetch_unit(g, ua);
            prefetch_unit(g, ub);
            let xq = p.q.add(b * PANEL_BLOCK);
            let mut s: [__m512i; T] = std::array::from_fn(|t| _mm512_set1_epi32(*p.off.add(b * PANEL + t)));
            for c in 0..8 {
                let wu = _mm512_xor_si512(chunk16(ua, ub, c), flip);
                for (t, st) in s.iter_mut().enumerate() {
                    *st = _mm512_dpbusd_epi32(*st, wu, bcast4z(xq.add((c * PANEL + t) * CHUNK)));
                }
            }
            let d = scales16(g, grp, b);
            for (t, (a, st)) in acc.iter_mut().zip(s).enumerate() {
                let dx = _mm512_mul_ps(d, _mm512_set1_ps(*p.d.add(b * PANEL + t)));
                *a = _mm512_fmadd_ps(_mm512_cvtepi32_ps(st), dx, *a);
            }
        }
        acc
    }
}
