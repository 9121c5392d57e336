//! Int8-activation kernels of the interleaved K-quants (q4_kr8 / q6_kr8, `format::kr8`), AVX2
//! and AVX-512 VNNI from one body each: a 32-byte load of a unit holds 4 quant bytes of each of
//! 8 rows, one broadcast of 4 activation bytes meets all 8 (`vpmaddubsw` + `vpmaddwd` on AVX2,
//! one `vpdpbusd` on VNNI), and the 8 rows' sums live in the 8 i32 lanes of one vector: no
//! horizontal adds anywhere. One pass over a group's units serves up to 4 (AVX2) or 8 (VNNI)
//! activation rows, so prefill unpacks each weight once per pass; the unit some way ahead is
//! prefetched (`tune::kr8_prefetch_units`).
//!
//! * q4_kr8, per sub-block pair p: 8 loads, low nibbles (sub-block 2p) and high (2p + 1) against
//!   their activation bytes (VNNI takes the high nibbles where they are, 16 × their value, and
//!   shifts the i32 sum back: one mask per load instead of a shift and a mask); the 8 rows' 6-bit
//!   scales and mins come out of the three interleaved scale words with ggml's word shuffle, 8
//!   rows at once, then one byte shuffle per sub-block; the activations' dx·Σqx (the mins'
//!   term) is taken once per product (`QuantizedActs::scaled_sums`).
//! * q6_kr8, per half n of the block and P ∈ {0, 1}: one load of each ql chunk makes the 6-bit
//!   quants of sub-blocks 4n + P (low nibbles) and 4n + P + 2 (high), with the qh chunk loaded
//!   once for both (the unit's scales and d first, then each half's qh and ql side by side: the
//!   kernel reads the unit front to back); each half of 16 sums apart, the offset −32 taken off as 32 · (the
//!   activations' half sum), then multiplied by the 8 rows' i8 scales in i32 (exact: |Σ| < 2²⁵).
//!   The 8 sub-block sums are then scaled and accumulated in the reference's order.
//!
//! The integer sums are the reference's (`kernels::kr8ref`) and every float operation is the
//! reference's in the same order on each lane: the results are its bits, on both sets.

use super::super::actq::QuantizedActs;
use super::super::generic;
use super::super::mat::Mat;
use super::qgroup::{bcast4, by_groups, store};
use crate::format::blocks::QK;
use crate::format::ggml::QK_K;
use crate::format::kr8::{Q6_D, Q6_HALF, Q6_QUANTS, Q6_SCALES, ROWS};
use core::arch::x86_64::*;
use std::ops::Range;

/// Unit bytes (8 blocks) of q4_kr8 and q6_kr8.
const Q4K_UNIT: usize = 1152;
const Q6K_UNIT: usize = 1680;

/// One int8 activation row: quants, block scales and dx·Σqx (per 32; q4_k), 32 · half sums
/// (per 16; q6_k).
#[derive(Clone, Copy)]
struct Acts {
    q: *const i8,
    d: *const f32,
    dsums: *const f32,
    halves: *const i32,
}

/// A kernel: out[t][j] = row 8·grp + j · activation row x[t] for the group whose first unit is
/// at `g` (nb units), x.len() activation rows (the kernel's T).
type Kern = unsafe fn(g: *const u8, nb: usize, x: &[Acts], out: &mut [[f32; ROWS]]);

/// The integer step of an instruction set: acc + Σ over each 4-byte lane of u8 w × i8 x.
trait Dot {
    unsafe fn dot(acc: __m256i, w: __m256i, x: __m256i) -> __m256i;
    /// The high nibbles of q as `dot` takes them, and the sum of their products back to
    /// Σ nibble·x (VNNI: the nibbles left in place, 16 × theirs, the sum shifted back exactly;
    /// AVX2's i16 pair sums would overflow there, so it shifts each load).
    unsafe fn high(q: __m256i) -> __m256i;
    unsafe fn high_sum(s: __m256i) -> __m256i;
}

struct Avx2;
impl Dot for Avx2 {
    #[inline(always)]
    unsafe fn dot(acc: __m256i, w: __m256i, x: __m256i) -> __m256i {
        // SAFETY: inlined only into the AVX2 kernels below (the CPU has AVX2). Pair sums of
        // vpmaddubsw stay in i16: 2 · 63 · 128 < 2¹⁵.
        unsafe { _mm256_add_epi32(acc, _mm256_madd_epi16(_mm256_maddubs_epi16(w, x), _mm256_set1_epi16(1))) }
    }
    #[inline(always)]
    unsafe fn high(q: __m256i) -> __m256i {
        // SAFETY: as `dot`.
        unsafe { _mm256_and_si256(_mm256_srli_epi16::<4>(q), _mm256_set1_epi8(15)) }
    }
    #[inline(always)]
    unsafe fn high_sum(s: __m256i) -> __m256i {
        s
    }
}

struct Vnni;
impl Dot for Vnni {
    #[inline(always)]
    unsafe fn dot(acc: __m256i, w: __m256i, x: __m256i) -> __m256i {
        // SAFETY: inlined only into the VNNI kernels below (the CPU has AVX-512 VL + VNNI).
        unsafe { _mm256_dpbusd_epi32(acc, w, x) }
    }
    #[inline(always)]
    unsafe fn high(q: __m256i) -> __m256i {
        // SAFETY: as `dot`.
        unsafe { _mm256_and_si256(q, _mm256_set1_epi8(0xF0u8 as i8)) }
    }
    #[inline(always)]
    unsafe fn high_sum(s: __m256i) -> __m256i {
        // SAFETY: as `dot`. s = 16 · Σ nibble·x exactly (|Σ| < 2²⁰), so the shift is exact.
        unsafe { _mm256_srai_epi32::<4>(s) }
    }
}

/// Prefetch the `bytes` bytes at p (a hint: never faults, any address is fine).
#[inline(always)]
unsafe fn prefetch(p: *const u8, bytes: usize) {
    for line in (0..bytes).step_by(64) {
        // SAFETY: a prefetch reads nothing architecturally.
        unsafe { _mm_prefetch::<_MM_HINT_T0>(p.wrapping_add(line).cast()) };
    }
}

/// Byte k (< 4) of each i32 lane of v, as f32.
#[inline(always)]
unsafe fn byte_ps(v: __m256i, k: usize) -> __m256 {
    // SAFETY: inlined only into the kernels below (AVX2 at least).
    unsafe {
        // Byte 0 of dword i of each 128-bit half: byte 4i + k of that half; the rest zero.
        let m: [i32; 4] = std::array::from_fn(|i| 0x8080_8000u32 as i32 | (4 * i + k) as i32);
        let mask = _mm256_setr_epi32(m[0], m[1], m[2], m[3], m[0], m[1], m[2], m[3]);
        _mm256_cvtepi32_ps(_mm256_shuffle_epi8(v, mask))
    }
}

/// q4_kr8 for T activation rows (see `Kern`).
#[inline(always)]
unsafe fn q4k<D: Dot, const T: usize>(g: *const u8, nb: usize, xs: &[Acts], out: &mut [[f32; ROWS]]) {
    // SAFETY: the caller's contract (`Kern`): nb whole units at g, nb blocks per activation row.
    unsafe {
        let x: [Acts; T] = std::array::from_fn(|k| xs[k]);
        let ahead = super::tune::kr8_prefetch_units();
        let m4 = _mm256_set1_epi8(15);
        let (m1, m2, m3) =
            (_mm256_set1_epi32(0x3f3f_3f3f), _mm256_set1_epi32(0x0f0f_0f0f), _mm256_set1_epi32(0x0303_0303));
        let mut acc = [_mm256_setzero_ps(); T];
        for b in 0..nb {
            let u = g.add(b * Q4K_UNIT);
            if ahead > 0 {
                prefetch(u.wrapping_add(ahead * Q4K_UNIT), Q4K_UNIT);
            }
            let d = _mm256_cvtph_ps(_mm_loadu_si128(u.cast()));
            let dmin = _mm256_cvtph_ps(_mm_loadu_si128(u.add(16).cast()));
            let u0 = _mm256_loadu_si256(u.add(32).cast());
            let u1 = _mm256_loadu_si256(u.add(64).cast());
            let u2 = _mm256_loadu_si256(u.add(96).cast());
            // ggml's scale_min_k4 on 8 rows at once: byte k of lane r of sc[0] is row r's scale
            // of sub-block k, of sc[1] sub-block 4 + k; mn likewise.
            let high0 = _mm256_slli_epi32(_mm256_and_si256(_mm256_srli_epi32(u0, 6), m3), 4);
            let high1 = _mm256_slli_epi32(_mm256_and_si256(_mm256_srli_epi32(u1, 6), m3), 4);
            let sc = [_mm256_and_si256(u0, m1), _mm256_or_si256(_mm256_and_si256(u2, m2), high0)];
            let mn = [_mm256_and_si256(u1, m1), _mm256_or_si256(_mm256_and_si256(_mm256_srli_epi32(u2, 4), m2), high1)];
            // d·scale and dmin·min of each sub-block j, 8 rows.
            let (mut dsc, mut dmn) = ([_mm256_setzero_ps(); 8], [_mm256_setzero_ps(); 8]);
            for j in 0..8 {
                dsc[j] = _mm256_mul_ps(d, byte_ps(sc[j / 4], j % 4));
                dmn[j] = _mm256_mul_ps(dmin, byte_ps(mn[j / 4], j % 4));
            }
            for p in 0..4 {
                // Sums of sub-blocks 2p (low nibbles) and 2p + 1 (high), per activation row.
                let (mut s0, mut s1) = ([_mm256_setzero_si256(); T], [_mm256_setzero_si256(); T]);
                for c in 0..8 {
                    let q = _mm256_loadu_si256(u.add(128 + 32 * (8 * p + c)).cast());
                    let (lo, hi) = (_mm256_and_si256(q, m4), D::high(q));
                    for t in 0..T {
                        let xb = x[t].q.add(QK_K * b + 64 * p + 4 * c);
                        s0[t] = D::dot(s0[t], lo, bcast4(xb));
                        s1[t] = D::dot(s1[t], hi, bcast4(xb.add(QK)));
                    }
                }
                for s in s1.iter_mut() {
                    *s = D::high_sum(*s);
                }
                for (hf, s) in [s0, s1].iter().enumerate() {
                    let j = 2 * p + hf;
                    for t in 0..T {
                        let k = 8 * b + j;
                        let f = _mm256_mul_ps(dsc[j], _mm256_set1_ps(*x[t].d.add(k)));
                        acc[t] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(s[t]), f, acc[t]);
                        acc[t] = _mm256_fnmadd_ps(dmn[j], _mm256_set1_ps(*x[t].dsums.add(k)), acc[t]);
                    }
                }
            }
        }
        store(acc, out)
    }
}

/// q6_kr8 for T activation rows (see `Kern`).
#[inline(always)]
unsafe fn q6k<D: Dot, const T: usize>(g: *const u8, nb: usize, xs: &[Acts], out: &mut [[f32; ROWS]]) {
    // SAFETY: the caller's contract (`Kern`): nb whole units at g, nb blocks per activation row.
    unsafe {
        let x: [Acts; T] = std::array::from_fn(|k| xs[k]);
        let ahead = super::tune::kr8_prefetch_units();
        let mut acc = [_mm256_setzero_ps(); T];
        for b in 0..nb {
            let u = g.add(b * Q6K_UNIT);
            if ahead > 0 {
                prefetch(u.wrapping_add(ahead * Q6K_UNIT), Q6K_UNIT);
            }
            // The integer sums S of the block's 8 sub-blocks (see `kr8ref::dot_i8_q6k`), per
            // activation row: one pass per (n, P) makes sub-blocks 4n + P and 4n + P + 2.
            let mut sums = [[_mm256_setzero_si256(); 8]; T];
            for n in 0..2 {
                q6_pair::<D, T, 0>(u, b, n, &x, &mut sums);
                q6_pair::<D, T, 1>(u, b, n, &x, &mut sums);
            }
            let d = _mm256_cvtph_ps(_mm_loadu_si128(u.add(Q6_D).cast()));
            for ((a, xt), st) in acc.iter_mut().zip(&x).zip(&sums) {
                for (s, &v) in st.iter().enumerate() {
                    let f = _mm256_mul_ps(d, _mm256_set1_ps(*xt.d.add(8 * b + s)));
                    *a = _mm256_fmadd_ps(_mm256_cvtepi32_ps(v), f, *a);
                }
            }
        }
        store(acc, out)
    }
}

/// Adds to sums[t][s] the integer sums of sub-blocks s = 4n + P (ql's low nibbles, qh bits
/// 2P) and 4n + P + 2 (high nibbles, bits 2P + 4) of the q6_kr8 unit at u (block b): per half
/// of 16, Σ q·qx over 4 chunks (each ql and qh chunk loaded once for both sub-blocks), the
/// offset −32 taken off as 32 · (the activations' half sum), times the 8 rows' i8 scales.
#[inline(always)]
unsafe fn q6_pair<D: Dot, const T: usize, const P: usize>(
    u: *const u8,
    b: usize,
    n: usize,
    x: &[Acts; T],
    sums: &mut [[__m256i; 8]; T],
) {
    // SAFETY: the caller's contract (`Kern`): the unit's chunks and the activation bytes exist.
    unsafe {
        let (m4, m30) = (_mm256_set1_epi8(15), _mm256_set1_epi8(0x30));
        let qh = u.add(Q6_QUANTS + Q6_HALF * n);
        let ql = qh.add(256 + 32 * 8 * P);
        let sub = [4 * n + P, 4 * n + P + 2];
        for h in 0..2 {
            let mut a = [[_mm256_setzero_si256(); 2]; T];
            for c in 4 * h..4 * h + 4 {
                let l = _mm256_loadu_si256(ql.add(32 * c).cast());
                let hb = _mm256_loadu_si256(qh.add(32 * c).cast());
                // qh's bits 2P and 2P + 4 moved to bits 4..6 of each byte.
                let (h0, h1) = if P == 0 {
                    (_mm256_slli_epi16::<4>(hb), hb)
                } else {
                    (_mm256_slli_epi16::<2>(hb), _mm256_srli_epi16::<2>(hb))
                };
                let q = [
                    _mm256_or_si256(_mm256_and_si256(l, m4), _mm256_and_si256(h0, m30)),
                    _mm256_or_si256(_mm256_and_si256(_mm256_srli_epi16::<4>(l), m4), _mm256_and_si256(h1, m30)),
                ];
                for t in 0..T {
                    let xb = x[t].q.add(QK_K * b + 4 * c);
                    for j in 0..2 {
                        a[t][j] = D::dot(a[t][j], q[j], bcast4(xb.add(QK * sub[j])));
                    }
                }
            }
            for j in 0..2 {
                let s = sub[j];
                let k = _mm256_cvtepi8_epi32(_mm_loadl_epi64(u.add(Q6_SCALES + 8 * (8 * n + 2 * (s % 4) + h)).cast()));
                for t in 0..T {
                    let hs = _mm256_set1_epi32(*x[t].halves.add(16 * b + 2 * s + h));
                    let e = _mm256_mullo_epi32(_mm256_sub_epi32(a[t][j], hs), k);
                    sums[t][s] = _mm256_add_epi32(sums[t][s], e);
                }
            }
        }
    }
}

/// The kernels of `body` on one instruction set, for 1, 2, 4 (and 8) activation rows.
macro_rules! kernels {
    ($name:ident, $features:literal, $dot:ty, $body:ident) => {
        #[target_feature(enable = $features)]
        unsafe fn $name<const T: usize>(g: *const u8, nb: usize, x: &[Acts], out: &mut [[f32; ROWS]]) {
            // SAFETY: the caller's contract (`Kern`); reached only through a table whose CPU has
            // these features.
            unsafe { $body::<$dot, T>(g, nb, x, out) }
        }
    };
}

kernels!(q4k_avx2, "avx2,fma,f16c", Avx2, q4k);
kernels!(q6k_avx2, "avx2,fma,f16c", Avx2, q6k);
kernels!(q4k_vnni, "avx512f,avx512bw,avx512vl,avx512vnni,avx2,fma,f16c", Vnni, q4k);
kernels!(q6k_vnni, "avx512f,avx512bw,avx512vl,avx512vnni,avx2,fma,f16c", Vnni, q6k);

/// out[t·rows.len() + i] = w[rows.start + i] · activation row t with `kerns[l]` taking 2^l
/// activation rows per pass (the ragged ends of `rows`: the reference).
fn drive(w: Mat<'_>, rows: Range<usize>, xa: &QuantizedActs, n: usize, out: &mut [f32], kerns: &[Kern], q6: bool) {
    let cols = w.cols();
    let (nb, unit) = (cols / QK_K, w.dtype().info().block_bytes as usize * ROWS);
    assert!(xa.cols == cols && xa.qs.len() >= n * cols && xa.sums.len() >= n * cols / QK);
    assert!(out.len() >= n * rows.len() && rows.end <= w.rows() && w.bytes().len() >= w.rows() / ROWS * nb * unit);
    // q6_k's offset meets the activations per half block of 16, q4_k's min per block.
    let (halves, dsums): (&[i32], &[f32]) = if q6 { (xa.half_sums(), &[]) } else { (&[], xa.scaled_sums()) };
    let acts: Vec<Acts> = (0..n)
        .map(|t| {
            let (q, d) = xa.row(t);
            let halves = halves.as_ptr().wrapping_add(t * cols / 16);
            let dsums = dsums.as_ptr().wrapping_add(t * cols / QK);
            Acts { q: q.as_ptr(), d: d.as_ptr(), dsums, halves }
        })
        .collect();
    let len = rows.len();
    by_groups(
        rows,
        n,
        1,
        out,
        |r, o| generic::gemv_i8(w, r, xa, n, o),
        |grp, _, at, out, tokens| {
            let g = w.bytes().as_ptr().wrapping_add(grp * nb * unit);
            let mut res = [[0f32; ROWS]; 8];
            let mut t = tokens.start;
            while t < tokens.end {
                let level = (tokens.end - t).min(1 << (kerns.len() - 1)).ilog2() as usize;
                let take = 1 << level;
                // SAFETY: the kernels' table only on CPUs with their features; group grp lies
                // inside the matrix (asserted above) and every activation row holds nb blocks.
                unsafe { kerns[level](g, nb, &acts[t..t + take], &mut res[..take]) };
                for (k, r) in res[..take].iter().enumerate() {
                    out[(t + k) * len + at..(t + k) * len + at + ROWS].copy_from_slice(r);
                }
                t += take;
            }
        },
    );
}

/// q4_kr8 · int8 activations (see `table::GemvI8Fn`), AVX2.
pub fn gemv_i8_q4k(w: Mat<'_>, rows: Range<usize>, xa: &QuantizedActs, n: usize, out: &mut [f32]) {
    drive(w, rows, xa, n, out, &[q4k_avx2::<1>, q4k_avx2::<2>, q4k_avx2::<4>], false)
}

/// q6_kr8 · int8 activations, AVX2.
pub fn gemv_i8_q6k(w: Mat<'_>, rows: Range<usize>, xa: &QuantizedActs, n: usize, out: &mut [f32]) {
    drive(w, rows, xa, n, out, &[q6k_avx2::<1>, q6k_avx2::<2>, q6k_avx2::<4>], true)
}

/// q4_kr8 · int8 activations, AVX-512 VNNI (eight activation rows per pass: 32 registers).
pub fn gemv_i8_q4k_vnni(w: Mat<'_>, rows: Range<usize>, xa: &QuantizedActs, n: usize, out: &mut [f32]) {
    drive(w, rows, xa, n, out, &[q4k_vnni::<1>, q4k_vnni::<2>, q4k_vnni::<4>, q4k_vnni::<8>], false)
}

/// q6_kr8 · int8 activations, AVX-512 VNNI.
pub fn gemv_i8_q6k_vnni(w: Mat<'_>, rows: Range<usize>, xa: &QuantizedActs, n: usize, out: &mut [f32]) {
    drive(w, rows, xa, n, out, &[q6k_vnni::<1>, q6k_vnni::<2>, q6k_vnni::<4>, q6k_vnni::<8>], true)
}
